"""phobos-pod's command line: `//pod -- --listen 127.0.0.1:PORT --device 0|cpu ...`.

Once it listens the pod prints exactly one line to stdout, `PHOBOS_POD_LISTENING host:port`
(flushed; `--listen HOST:0` picks a free port), and logs only to stderr.

Token: --token-file PATH (first line, whitespace stripped) or the environment variable
PHOBOS_TOKEN; one of them is required and the token is never logged. Storage roots: every
--storage-root (repeatable); default the working directory the pod was started in.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import importlib
import sys
import threading
from pathlib import Path

from common import dataclass_code_cache
from common import log as plog
from common.cli import pause_collection_for_imports, run_main_and_leave, user_path
from common.cluster_token import TOKEN_ENV, read_token
from common.errors import UserError
from pod.rpc.gate import LOGIN_TIMEOUT_S, MAX_PENDING_LOGINS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phobos-pod", description="Run one phobos pod (one GPU or a CPU).")
    parser.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                        help="address to serve on; port 0 picks a free one (default 127.0.0.1:0)")
    parser.add_argument("--device", default="cpu", metavar="0|cpu",
                        help="CUDA device ordinal, or 'cpu' for the reference-interpreter backend")
    parser.add_argument("--token-file", metavar="PATH",
                        help=f"file holding the cluster's token (default: ${TOKEN_ENV})")
    parser.add_argument("--storage-root", action="append", default=[], metavar="DIR",
                        help="directory storage URIs must lie in (repeatable; default: working directory)")
    parser.add_argument("--heartbeat-interval", type=float, default=0.5, metavar="S",
                        help="seconds between heartbeats to the scheduler (default 0.5)")
    parser.add_argument("--scheduler-timeout", type=float, default=5.0, metavar="S",
                        help="exit when heartbeats have failed for this long, with two in a row "
                             "unanswered (default 5)")
    parser.add_argument("--fetch-timeout", type=float, default=30.0, metavar="S",
                        help="give up on a peer that sends nothing for this long (default 30)")
    parser.add_argument("--login-timeout", type=float, default=LOGIN_TIMEOUT_S, metavar="S",
                        help="close a connection that has not logged in within S seconds "
                             f"(default {LOGIN_TIMEOUT_S:g})")
    parser.add_argument("--max-pending-logins", type=int, default=MAX_PENDING_LOGINS, metavar="N",
                        help="connections not logged in at most; more are closed at once "
                             f"(default {MAX_PENDING_LOGINS})")
    parser.add_argument("--no-data-port", action="store_true",
                        help="serve tiles only as chunks over the RPC port (no second, bulk TCP port)")
    parser.add_argument("--keep-serving", action="store_true",
                        help="when the scheduler leaves, drop its jobs and wait for the next scheduler "
                             "instead of exiting (pods started once serve job after job)")
    parser.add_argument("--hello-timeout", type=float, metavar="S",
                        help="exit 1 when no scheduler has said hello within S seconds of listening, "
                             "naming this pod's address (default: wait for ever)")
    plog.add_arguments(parser)
    return parser


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UserError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:0")
    return host.strip("[]"), int(port)


def required_token(token_file: str | None) -> str:
    token = read_token(token_file)
    if token is None:
        raise UserError(f"no token: pass --token-file PATH or set {TOKEN_ENV}")
    return token


# What a pod's first job needs that its start-up does not (the leaf's parser, binder and code
# generator): imported in the background once the pod listens, while it waits for its scheduler,
# so that the job's set-up does not (about 0.1 s of a first job on the H200).
FIRST_JOB_MODULES = {
    "cpu": ("compiler.cluster.leaves", "compiler.interp.interpreter"),
    "gpu": ("compiler.cluster.leaves", "compiler.cuda.compiled", "compiler.cuda.launch"),
}


def start_cuda(device: str) -> threading.Thread | None:
    """Start CUDA (cupy's import, the device's context) in a thread beside the pod's own imports:
    the context's creation runs in the driver without Python's lock. make_backend joins it; a
    failure here shows there, as the backend's own error."""
    if not device.isdigit():
        return None
    # numpy first, here: cupy's import in the thread and the pod's own imports (storage, ml_dtypes)
    # both import it, and two threads importing numpy at once can meet inside its circular
    # imports, where Python breaks the lock cycle by handing one a partly initialised module
    # ("cannot import name '__cpu_features__'"): the pod then died before listening.
    import numpy  # noqa: F401

    def start() -> None:
        try:
            import cupy

            cupy.cuda.Device(int(device)).use()
            cupy.cuda.runtime.free(0)  # creates the context
        except Exception:  # GpuBackend meets the same error and reports it
            pass

    thread = threading.Thread(target=start, name="pod-cuda-start", daemon=True)
    thread.start()
    return thread


FIRST_JOB_MODULES_IMPORTED = "first job's modules imported"


def import_in_background(kind: str) -> None:
    def run() -> None:
        modules = FIRST_JOB_MODULES.get(kind, ())
        for name in modules:
            importlib.import_module(name)
        # the pod's dataclasses are all made by now, and the pod waits for its scheduler
        written = dataclass_code_cache.save()
        if written:
            plog.get_logger().debug("dataclass code cache written", modules=written)
        # an event, not a guess at a delay, for whoever measures the pod's settled memory
        plog.get_logger().info(FIRST_JOB_MODULES_IMPORTED, modules=list(modules))

    threading.Thread(target=run, name="pod-imports", daemon=True).start()


def make_backend(device: str, cuda: threading.Thread | None = None):
    if cuda is not None:
        cuda.join()
    if device == "cpu":
        from pod.backends.backend_cpu import CpuBackend

        return CpuBackend()
    if not device.isdigit():
        raise UserError(f"--device {device!r}: expected a CUDA device number or 'cpu'")
    try:
        from pod.backends.backend_gpu import GpuBackend

        return GpuBackend(int(device))
    except ImportError:
        raise UserError(f"--device {device}: cupy is not installed; use --device cpu") from None
    except Exception as err:
        raise UserError(f"--device {device}: no usable CUDA device ({err})") from None


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise UserError(f"{name} must be positive, got {value}")
    return value


def main(argv: list[str]) -> int:
    # A crash inside a native library (pycapnp, cupy) would otherwise end the pod without a word in
    # its log; with faulthandler the log shows every thread's stack at the fatal signal.
    faulthandler.enable()
    args = build_parser().parse_args(argv)
    cuda = start_cuda(args.device)
    plog.configure_from_args(args)
    host, port = parse_listen(args.listen)
    roots = tuple(user_path(r) for r in args.storage_root) or (user_path("."),)
    for root in roots:
        if not root.is_dir():
            raise UserError(f"--storage-root {root}: not a directory")
    from pod.rpc.server import PodConfig, PodServer  # after the flags: loads the schema and capnp
    from pod.rpc.transfer import require_crc32c

    config = PodConfig(
        host=host, port=port, token=required_token(args.token_file), roots=tuple(Path(r) for r in roots),
        heartbeat_interval=_positive("--heartbeat-interval", args.heartbeat_interval),
        scheduler_timeout=_positive("--scheduler-timeout", args.scheduler_timeout),
        fetch_timeout=_positive("--fetch-timeout", args.fetch_timeout), data_port=not args.no_data_port,
        keep_serving=args.keep_serving, login_timeout=_positive("--login-timeout", args.login_timeout),
        max_pending_logins=int(_positive("--max-pending-logins", args.max_pending_logins)),
        hello_timeout=None if args.hello_timeout is None
        else _positive("--hello-timeout", args.hello_timeout))
    require_crc32c()
    backend = make_backend(args.device, cuda)

    def on_listening(bound_host: str, bound_port: int) -> None:
        print(f"PHOBOS_POD_LISTENING {bound_host}:{bound_port}", flush=True)
        import_in_background(backend.kind)
        loop = type(asyncio.get_running_loop()).__module__.split(".")[0]  # uvloop, or asyncio without it
        plog.get_logger().info("pod listening", address=f"{bound_host}:{bound_port}",
                               backend=backend.kind, roots=[str(r) for r in roots], loop=loop)
        plog.get_logger().debug("dataclass code cache", program="phobos-pod", **dataclass_code_cache.stats())

    return _run_loop(lambda: PodServer(config, backend), on_listening)


def _run_loop(make_server, on_listening) -> int:
    """Run the pod on uvloop inside pycapnp's KJ loop (schemas/rpc_streams.py; it also says why
    every connection goes through its stream glue: pycapnp's own crashed pods under uvloop)."""
    from schemas import rpc_streams

    # Worker threads (leaf launches, storage, bulk transfers) hand results back to the loop; with
    # the default 5 ms GIL switch interval each hand-off can wait that long, which dominated the
    # per-instruction overhead (measured in benchmarks/test_pod_transfer.py).
    sys.setswitchinterval(0.0005)

    async def run() -> int:
        server = make_server()  # needs the running loop (asyncio.Event, pycapnp)
        return await server.serve(on_listening)

    return rpc_streams.run(run())


def entry() -> None:
    dataclass_code_cache.install()  # done already when started as pod.main (pod/main.py says why)
    # Collection stays off from here: the server collects on its own loop (PodServer._collect_garbage).
    pause_collection_for_imports()
    run_main_and_leave(main)  # the interpreter's teardown is skipped: common/cli.py says why


if __name__ == "__main__":
    entry()
