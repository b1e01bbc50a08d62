"""Layerwise: builds the Gradio app from ui/ and launches it.

    python app.py                 # http://127.0.0.1:7860, offline
    python app.py --online        # allow model / dataset hub downloads
    python app.py --host 0.0.0.0  # serve on the network (a Hugging Face Space does this by itself)
    python app.py --talk          # every page opens in the presenter view (a link may say ?view=lab)
    python app.py --mcp           # also an MCP server at /gradio_api/mcp/ (LAYERWISE_MCP=1 does the same, e.g. on a
                                  # Space); the tools are ui.tools's, docs/mcp-and-batch.md says how to connect
    python app.py --public        # public mode (on by default on a Space): listed models only, no server path
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import threading


def parse_args(argv=None) -> argparse.Namespace:
    on_space = bool(os.environ.get("SPACE_ID"))
    p = argparse.ArgumentParser(description="Layerwise: an interactive lab for the layers of language models.")
    p.add_argument("--host", default="0.0.0.0" if on_space else "127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 on a Hugging Face Space)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    p.add_argument("--online", action="store_true", help="allow model and dataset hub downloads (off by default)")
    p.add_argument("--share", action="store_true", help="open a public gradio.live tunnel (off by default)")
    p.add_argument("--prepare", action="store_true", default=on_space,
                   help="prepare missing datasets and packaged models before serving (default on a Space)")
    p.add_argument("--concurrency", type=int, default=2,
                   help="heavy events that run at once in the whole server, whichever handler and visitor (default "
                        "2, one per core on a small machine)")
    p.add_argument("--talk", action="store_true",
                   help="open every page in the presenter view (talk-size text, one chart per screen, arrow keys)")
    p.add_argument("--mcp", action="store_true", default=os.environ.get("LAYERWISE_MCP") == "1",
                   help="also serve the analyses as MCP tools at /gradio_api/mcp/ (off by default; LAYERWISE_MCP=1)")
    p.add_argument("--cheap-lane", type=int, default=8, metavar="N",
                   help="cheap events (no progress bar: a dataset page, a text's targets) share one lane of N at once, "
                        "apart from the heavy ones (default 8; 0: each handler its own group of --concurrency)")
    p.add_argument("--public", action="store_true",
                   help="public mode: models only from the registry and the hub allow-list, no path on the server "
                        "accepted anywhere (default on a Hugging Face Space; LAYERWISE_PUBLIC=0 turns it off there)")
    return p.parse_args(argv)


def public_mode(args: argparse.Namespace) -> bool:
    """Whether the app serves in public mode: ``--public``, ``LAYERWISE_PUBLIC=1``, or on a Space unless
    ``LAYERWISE_PUBLIC=0`` says otherwise."""
    env = os.environ.get("LAYERWISE_PUBLIC")
    return args.public or env == "1" or (bool(os.environ.get("SPACE_ID")) and env != "0")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.mcp and importlib.util.find_spec("mcp") is None:
        print("error: --mcp needs the mcp package. Fix: pip install -r requirements.txt (it pins mcp).",
              file=sys.stderr)
        return 2
    from core.settings import configure

    public = public_mode(args)
    configure(online=args.online or os.environ.get("LAYERWISE_ONLINE") == "1", public=public)  # before gradio / hf
    if os.environ.get("SPACE_ID"):  # ZeroGPU needs `spaces` before Gradio and CUDA start (a no-op on other Spaces)
        try:
            import spaces  # noqa: F401
        except ImportError:
            pass
    if args.prepare:
        from core.data import prepare
        from core.zoo import PACKAGED, prepare_model

        prepare(progress=lambda name: print(f"preparing {name}", flush=True))
        for name in PACKAGED:
            prepare_model(name, progress=lambda msg: print(msg, flush=True))
    from core.paths import write_problem
    from core.files import files_dir
    from ui import CSS, build_app, head, projector_theme
    from ui.lanes import assign_lanes
    from ui.limits import launch_kwargs, middleware
    from ui.links import read_long_request_lines

    problem = write_problem()
    if problem:  # a read-only or full LAYERWISE_HOME: serve what can be served, say what cannot
        print(f"warning: {problem} Results will be computed but not cached, and downloads are off.", flush=True)
    try:
        served = [str(files_dir())]  # the download files of results (core.runner.Result.files)
    except OSError:
        served = []
    import torch

    if torch.cuda.is_available():  # every kernel's self-check once, in the background, under the keys models use
        from kernels.checks import warm

        threading.Thread(target=warm, args=("cuda",), name="kernel-checks", daemon=True).start()
    demo = build_app()
    assign_lanes(demo, args.cheap_lane, heavy_limit=args.concurrency)  # one heavy lane for the whole server
    demo.queue(default_concurrency_limit=args.concurrency, max_size=64)
    mode = ("online" if args.online else "offline") + (", public: listed models only, no server path" if public else "")
    print(f"Layerwise on http://{args.host}:{args.port} ({mode})", flush=True)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, theme=projector_theme(), css=CSS,
                head=head(talk=args.talk), show_error=not public, ssr_mode=False, footer_links=["api"],
                allowed_paths=served, app_kwargs={"middleware": middleware(served)}, prevent_thread_lock=True,
                mcp_server=args.mcp, **launch_kwargs())  # public: the app's own messages (gr.Error), never an exception's
    read_long_request_lines(demo)  # a long link reaches the app (which cuts it) instead of the server's bare 400
    from gradio.utils import get_upload_folder

    from ui.tempfolder import keep_bounded

    keep_bounded(get_upload_folder())  # Gradio's temp folder under LAYERWISE_MAX_TEMP_MB, not only swept hourly
    if args.mcp:  # the MCP server lists the agent tools (ui.tools), not the page's own endpoints
        from ui.tool_endpoints import only_tools

        tools = only_tools(demo)
        print(f"MCP tools ({len(tools)}): {', '.join(tools)}; streamable HTTP at "
              f"http://{args.host}:{args.port}/gradio_api/mcp/", flush=True)
    from ui import publish  # every precomputed view built once and put in the page, now that the page is served

    threading.Thread(target=publish, args=(demo,), kwargs={"log": print}, daemon=True, name="layerwise-links").start()
    demo.block_thread()


if __name__ == "__main__":
    sys.exit(main())
