"""The evaluation status names the highest ΔA^F as measured: a method within one standard error of it is tied."""
from core.lrp.views import delta_af_leader_text


def _faith(**methods):
    return {name: {"delta_af": v, "delta_af_sem": s} for name, (v, s) in methods.items()}


def test_within_one_standard_error_is_a_tie():
    faith = _faith(mambalrp=(0.41, 0.03), ln_rule=(0.39, 0.025), gradient=(0.10, 0.02))
    text = delta_af_leader_text(faith, list(faith), "mambalrp")
    assert "tied within one standard error" in text
    assert "0.390 ± 0.025" in text and "0.100" not in text  # only the tied method is named beside the leader


def test_ahead_by_more_than_one_standard_error():
    faith = _faith(mambalrp=(0.41, 0.01), ln_rule=(0.30, 0.02))
    text = delta_af_leader_text(faith, list(faith), "mambalrp")
    assert "tied" not in text and "more than one standard error" in text


def test_larger_of_the_two_standard_errors_counts():
    # 0.41 - 0.37 = 0.04: beyond the leader's 0.01 but within the other's 0.05
    faith = _faith(mambalrp=(0.41, 0.01), ln_rule=(0.37, 0.05))
    assert "tied" in delta_af_leader_text(faith, list(faith), "mambalrp")


def test_no_standard_error_claims_no_ranking():
    faith = _faith(mambalrp=(0.41, None), ln_rule=(0.40, None))
    text = delta_af_leader_text(faith, list(faith), "mambalrp")
    assert "tied" not in text and "standard error" in text and "ahead" not in text
