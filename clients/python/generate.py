"""Regenerates the lock.v1 stubs in src/lock_client/_proto from config/proto with
grpcio-tools (the same proto the Rust crates build from). `make test` checks that the
committed stubs are what this produces (tests/test_generated.py).

    python generate.py [OUT_DIR]
"""

import pathlib
import sys

from grpc_tools import protoc

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "config" / "proto"
PACKAGE = "lock_client._proto"


def generate(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO_ROOT / "lock" / "v1" / "lock.proto"),
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed ({code})")
    # protoc writes `from lock.v1 import lock_pb2`: make it the package's own module, so
    # the stubs never shadow or collide with another top-level `lock` package.
    grpc_file = out / "lock" / "v1" / "lock_pb2_grpc.py"
    text = grpc_file.read_text()
    grpc_file.write_text(text.replace("from lock.v1 import", f"from {PACKAGE}.lock.v1 import"))
    for pkg in [out, out / "lock", out / "lock" / "v1"]:
        (pkg / "__init__.py").write_text("")


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "src" / "lock_client" / "_proto")
