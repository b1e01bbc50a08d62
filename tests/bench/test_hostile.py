"""bench/hostile.py --smoke: the image bomb refused by its header and a sweep of a small temp folder, in-process
(the full run starts a public app: the figures in docs/security.md)."""
import pytest

from tests.bench.smoke import assert_finite, run_smoke

pytestmark = pytest.mark.slow


def test_smoke_refuses_the_bomb_by_its_header_and_sweeps(tmp_path):
    report = run_smoke(tmp_path, "hostile.py")
    assert_finite(report)
    assert report["image_bomb"]["refused"] is True
    assert report["temp_folder"] == {"before": 5000, "after": 2000, "removed": 3}
