"""The NeuZip tab's *Training* section: NeuZip's first half, training with compressed weights beside vanilla, LOMO and
QLoRA. Opens on the committed runs at real size (``assets/neuzip/training.json``); *Train* runs a small comparison
live (progress and Stop). Gradio wiring only: :func:`core.neuzip.training_result` and
:func:`core.neuzip.training_example_result` do the work."""
from __future__ import annotations

import gradio as gr

import core.neuzip as nz
from core.errors import LayerwiseError
from ui.errors import user_errors
from ui.stopping import job, stop
from core.neuzip import effects_markdown
from ui.widgets import finite_number, frame, number

INTRO = ("**Training with compressed weights** (the paper's first half, Table 1). Each mode trains the same model from "
         "the same weights on the same batches: " + "; ".join(f"*{m.label}*: {m.description}"
                                                               for m in nz.TRAINING_MODES.values()) +
         ". The bars split each mode's peak of live tensor memory (measured by the allocator, not estimated) into "
         "weights, gradients, optimizer state and activations, with iterations per second on top; LOMO + NeuZip's loss "
         "curve (dashed) lies exactly on LOMO's: lossless compression changes nothing in the training.")
TABLE_COLUMNS = {"final_loss": "final loss", "peak_MiB": "peak MiB", "weights_MiB": "weights", "gradients_MiB":
                 "gradients", "optimizer_MiB": "optimizer", "activations_MiB": "activations", "memory_vs_vanilla":
                 "memory / vanilla", "memory_vs_lomo": "memory / LOMO", "it_per_s": "it/s (wall)", "speed_vs_vanilla": "speed / vanilla (wall)",
                 "it_per_cpu_s": "it/s (CPU time)", "cpu_speed_vs_vanilla": "speed / vanilla (CPU time)",
                 "peak_RSS_MiB": "peak RSS MiB"}
LIVE_MODELS = ["tiny-llama", "mathneuro-tiny", "smollm2-135m", "mixln:pre-ln", *[m for m in nz.RANDOM_MODELS
                                                                               if m != "tiny-llama"]]
LIVE_DEFAULT = ["vanilla", "vanilla-adamw", "lomo", "lomo+neuzip"]
MAX_LIVE_STEPS = 200


PAPER_COLUMNS = {"paper_row": "the paper's row", "peak_GiB": "peak GiB", "memory_vs_vanilla": "memory / vanilla",
                 "memory_vs_lomo": "memory / LOMO", "it_per_s": "it/s", "speed_vs_vanilla": "speed / vanilla"}


def _outputs(res):
    return (res.status, res.figures["memory"], res.figures["loss"],
            frame(res.tables["training"]).rename(columns=TABLE_COLUMNS),
            frame(res.tables["paper"]).rename(columns=PAPER_COLUMNS),
            frame(res.tables["paper_table2"]).rename(columns=PAPER_COLUMNS))


@user_errors
def show_example(model):
    """The committed training runs of ``model``."""
    return _outputs(nz.training_example_result(model))


@user_errors
def train_live(model, modes, steps, batch, seq, request: gr.Request = None, progress=gr.Progress()):
    """Train the chosen model in the chosen modes now and measure each (minutes for SmolLM2-135M on 2 cores)."""
    steps = number(steps, "steps")
    if steps > MAX_LIVE_STEPS:
        raise LayerwiseError(f"{steps} steps is more than the tab runs live ({MAX_LIVE_STEPS}).",
                             fix="use python -m core neuzip train for longer runs")
    return _outputs(nz.training_result(model, modes or [], steps, number(batch, "batch"),
                                       number(seq, "sequence length"), progress=job(request, progress)))


def build() -> None:
    """The section, below the tab's other parts."""
    first = nz.TRAINING_EXAMPLES[0][0]
    try:
        shown = _outputs(nz.training_example_result(first))
    except LayerwiseError as err:
        shown = (str(err), None, None, None, frame(nz.paper_rows()).rename(columns=PAPER_COLUMNS),
                 frame(nz.paper_table2_rows()).rename(columns=PAPER_COLUMNS))
    gr.Markdown("### Training with compressed weights")
    gr.Markdown(INTRO, elem_classes="lw-explain")
    with gr.Row():
        example = gr.Dropdown([m for m, _, _ in nz.TRAINING_EXAMPLES], value=first, label="precomputed run",
                              info="committed runs at real size", elem_id="neuzip-training-example")
        model = gr.Dropdown(LIVE_MODELS, value="tiny-llama", allow_custom_value=True, label="model (live run)",
                            info="a registered or local causal LM, mixln:<run>, or a random-weight Llama config")
        steps = finite_number(value=8, precision=0, minimum=1, maximum=MAX_LIVE_STEPS, label="steps")
        batch = finite_number(value=2, precision=0, minimum=1, maximum=64, label="batch")
        seq = finite_number(value=64, precision=0, minimum=8, maximum=4096, label="tokens a sequence")
    modes = gr.CheckboxGroup([(m.label, m.name) for m in nz.TRAINING_MODES.values()], value=LIVE_DEFAULT,
                             label="modes (live run)", elem_id="neuzip-training-modes")
    with gr.Row():
        b_train = gr.Button("Train (live)", variant="primary", size="sm")
        b_stop = gr.Button("Stop", variant="stop", size="sm")
    status = gr.Markdown(shown[0], elem_id="neuzip-training-summary")
    # one chart a row, unlabelled (each figure has its title): side by side, seven labelled bars do not fit
    memory = gr.Plot(shown[1], show_label=False, label="Peak memory by mode", elem_id="neuzip-training-memory")
    loss = gr.Plot(shown[2], show_label=False, label="Loss curves", elem_id="neuzip-training-loss")
    table = gr.Dataframe(shown[3], interactive=False, elem_id="neuzip-training-table",
                         label="Measured (memory in MiB; ratios against vanilla and LOMO, same run)")
    paper = gr.Dataframe(shown[4], interactive=False, elem_id="neuzip-training-paper",
                         label="The paper's Table 1, whole: pre-training on one GPU (validation loss, peak memory in "
                               "GiB, iterations per second)")
    paper2 = gr.Dataframe(shown[5], interactive=False, elem_id="neuzip-training-paper-table2",
                          label="The paper's Table 2, whole: fine-tuning T5 on SQL generation beside QLoRA (BLEU, "
                                "memory in GiB, iterations per second; ² = double-quantized scales)")
    gr.Markdown(effects_markdown(), elem_id="neuzip-training-qlora-order", elem_classes="lw-explain")
    outputs = [status, memory, loss, table, paper, paper2]
    example.change(show_example, example, outputs, api_name="neuzip_training_example")
    ev = b_train.click(train_live, [model, modes, steps, batch, seq], outputs, api_name="neuzip_train",
                       concurrency_limit=1)  # one training at a time: each measures its own memory and speed
    b_stop.click(stop, outputs=status, cancels=[ev], api_name="neuzip_train_stop")
