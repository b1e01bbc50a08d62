"""The *Batch* section of the MambaLRP tab: an uploaded CSV / JSONL of texts through :func:`core.batch.run` (kind
``lrp``), with progress and Stop, and the results as Parquet and CSV. A stopped batch keeps its finished rows: the
same file and settings resume it (the results live in the downloads folder, keyed by the file's SHA-256 and the
settings).

The upload is capped here at :data:`MAX_UPLOAD_BYTES` and :data:`MAX_ROWS` (this section's own limits, so one visitor
cannot queue hours of work), after the app-wide upload limits (:mod:`ui.limits`: checked on the upload request and
again here); the command line (``python -m core lrp batch``) has neither.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import gradio as gr
import pandas as pd

import core.batch as batch
import core.files as core_files
import core.lrp as lrp
from core.errors import BadInputError, Cancelled
from core.runner import digest
from ui.errors import user_errors
from ui.limits import check_uploads
from ui.stopping import job, stop
from ui.widgets import finite_number

MAX_UPLOAD_BYTES = 5 * 1024**2  # this section's upload cap (about 50,000 short reviews)
MAX_ROWS = 2000  # rows a batch in the app may have (about 5 minutes of MambaLRP on the embedded models, 2 cores)
PREVIEW_ROWS = 20
STEM = "lrp-batch"
NOTE = (f"Upload a **CSV** with a `text` column (and a header row) or a **JSON Lines** file with a `text` field per "
        f"line (at most {MAX_UPLOAD_BYTES // 1024**2} MB and {MAX_ROWS:,} rows here; the command line "
        "`python -m core lrp batch` has no limit). Other columns are kept. Every row gets the prediction, the full "
        "relevance vector and the most relevant tokens of each method; rows are cached like single texts, and a "
        "stopped batch continues where it stopped when you press *Run batch* again with the same file and settings.")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _upload(path) -> str:
    """The uploaded file's path, refused when missing, over the app's upload limits (:func:`ui.limits.check_uploads`)
    or over :data:`MAX_UPLOAD_BYTES`."""
    if not path:
        raise BadInputError("No file uploaded.", fix="upload a .csv or .jsonl file with a text column.")
    path = check_uploads(path)[0]
    size = Path(path).stat().st_size
    if size > MAX_UPLOAD_BYTES:
        raise BadInputError(f"The file has {size:,} bytes; a batch here takes at most {MAX_UPLOAD_BYTES:,}.",
                            fix="split it, or run `python -m core lrp batch` on the command line.")
    return path


def _preview(out: Path, methods: list[str]) -> pd.DataFrame:
    """The first rows of a batch output: text, prediction, each method's top tokens, error."""
    import pyarrow.parquet as pq

    first = pq.ParquetFile(str(out)).read_row_group(0).slice(0, PREVIEW_ROWS).to_pandas()
    shown = pd.DataFrame({"row": first["index"], "text": first["text"].str.slice(0, 80),
                          "prediction": first["predicted"],
                          "probability": first["predicted_probability"].round(3)})
    for m in methods:
        shown[f"{m}: top tokens"] = [", ".join(t.strip() for t in v) if v is not None else "" for v in
                                     first[f"{m}_top_tokens"]]
    shown["error"] = first["error"].fillna("")
    return shown


@user_errors
def run_batch(upload, model, methods, top_k, request: gr.Request = None, progress=gr.Progress()):
    """Explain every text of an uploaded CSV / JSONL file (kind ``lrp``); resumes a stopped batch of the same file."""
    path = _upload(upload)
    settings = lrp.BATCH.settings(model=model, methods=methods, top_k=top_k)
    folder = core_files.files_dir() / f"batch-{digest(_sha256(path), settings)}"
    folder.mkdir(exist_ok=True)
    out = folder / f"{STEM}.parquet"
    try:
        s = batch.run(lrp.BATCH, path, out, job(request, progress), max_rows=MAX_ROWS, **settings)
    except Cancelled as stop:
        return (str(stop), gr.skip(), gr.update(value=None, visible=False))
    csv = batch.to_csv(out, folder / f"{STEM}.csv")
    rate = f", {s['rows_per_second']:.2f} rows/s" if s.get("rows_per_second") else ""
    status = (f"**{s['rows']} rows** of {Path(path).name} explained with {', '.join(settings['methods'])} on "
              f"**{settings['model']}**: {s['finished_before']} done before, {s['done_now']} now ({s['computed']} "
              f"computed, {s['cache']} from the cache, {s['precomputed']} precomputed, {s['errors']} refused) in "
              f"{s['seconds']} s{rate}. The first {min(PREVIEW_ROWS, s['rows'])} rows are below; the files hold all.")
    return status, _preview(out, settings["methods"]), gr.update(value=[str(out), str(csv)], visible=True)


def stop_batch(request: gr.Request = None) -> None:
    """Stop this session's batch after its current row (not ``cancels=``: the batch answers with what it kept)."""
    stop(request)


def build() -> None:
    """The section, inside the MambaLRP tab."""
    with gr.Accordion("Batch: a file of texts", open=False, elem_id="lrp-batch"):
        gr.Markdown(NOTE, elem_classes="lw-explain")
        with gr.Row():
            upload = gr.File(label="Texts (.csv or .jsonl)", file_types=[".csv", ".jsonl"], type="filepath",
                             elem_id="lrp-batch-upload", scale=2)
            with gr.Column(scale=3):
                with gr.Row():
                    model = gr.Dropdown(list(lrp.TEXT_MODELS), value=lrp.TEXT_MODELS[0], allow_custom_value=True,
                                        label="Text model", elem_id="lrp-batch-model")
                    top_k = finite_number(lrp.BATCH_TOP_K, precision=0, minimum=1, maximum=lrp.BATCH_MAX_TOP_K,
                                          label="Most relevant tokens listed", elem_id="lrp-batch-top-k")
                methods = gr.CheckboxGroup(lrp.method_choices(), value=["mambalrp"], label="Methods",
                                           elem_id="lrp-batch-methods")
                with gr.Row():
                    run = gr.Button("Run batch", variant="primary", elem_id="lrp-batch-run")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="lrp-batch-stop", scale=0, min_width=90)
        status = gr.Markdown("Upload a file and press *Run batch*.", elem_id="lrp-batch-status")
        preview = gr.Dataframe(None, interactive=False, label="First rows", elem_id="lrp-batch-preview")
        files = gr.File(None, visible=False, label="Results: Parquet (lists as arrays) and CSV (lists as JSON)",
                        file_count="multiple", interactive=False, elem_id="lrp-batch-files",
                        elem_classes="lw-downloads")
    run.click(run_batch, [upload, model, methods, top_k], [status, preview, files], api_name="lrp_batch")
    stop_btn.click(stop_batch, None, None, api_name="lrp_batch_stop")  # the batch sees the flag, keeps its rows
