"""The fuzz tests judge a call by the exceptions in the server's log: the parser must name the raised exception even
when another thread's output (transformers' "Loading weights" bar) lands inside the traceback."""
from tests.fuzz.common import raised_exceptions

LOG = """Traceback (most recent call last):
  File "ui/errors.py", line 10, in wrapped
    raise gr.Error(message)
Loading weights: 100%|##########| 38/38 [00:00<00:00, 2235.55it/s]
gradio.exceptions.Error: 'The target must be a class of the model'
some unrelated line
Traceback (most recent call last):
  File "core/lrp/service.py", line 2, in explain
    return run()
ValueError
"""


def test_an_interleaved_progress_bar_is_not_taken_for_the_exception():
    found = raised_exceptions(LOG)
    assert [f.split("  [at")[0] for f in found] == [
        "gradio.exceptions.Error: 'The target must be a class of the model'", "ValueError"]
    assert 'File "ui/errors.py", line 10, in wrapped' in found[0]
