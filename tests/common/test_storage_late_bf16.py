"""ml_dtypes loads with the first bf16 header or dtype, not with common.storage: a job without
bf16 tensors never pays its import (docs/performance.md, start-up). Each test runs in a fresh
interpreter, where what is loaded can be seen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

REPO = Path(__file__).resolve().parents[2]


def run_fresh(script: str, folder: Path) -> list[str]:
    env = {"PYTHONPATH": str(REPO), "FOLDER": str(folder), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_f32_and_f16_files_are_read_and_written_without_ml_dtypes(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    np.save(tmp_path / "h.npy", np.ones(4, np.float16))
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "import numpy as np\n"
        "from common import storage\n"
        "from schemas.program import Region\n"
        "folder = Path(os.environ['FOLDER'])\n"
        "assert storage.tensor_meta(folder / 'a.npy') == ((3, 4), 'f32')\n"
        "assert storage.tensor_meta(folder / 'h.npy') == ((4,), 'f16')\n"
        "got = storage.read_region(folder / 'a.npy', Region('a', (1, 0), (2, 4)))\n"
        "staging = storage.create_staging(folder / 'c.npy', (2, 4), 'f16', 'job1')\n"
        "storage.write_region(staging, Region('c', (0, 0), (2, 4)), got)\n"
        "storage.commit(staging, folder / 'c.npy')\n"
        "assert 'bf16' in storage.STORAGE_DTYPES and list(storage.STORAGE_DTYPES)[2] == 'bf16'\n"
        "print('ml_dtypes' in sys.modules, storage.dtype_name(np.float32), float(got.sum()))\n"
    )
    assert run_fresh(script, tmp_path) == ["False", "f32", "60.0"]
    assert np.load(tmp_path / "c.npy").dtype == np.float16


def test_a_bf16_header_loads_ml_dtypes_when_it_is_read(tmp_path):
    """Both headers a bf16 file can have: `bfloat16` (ours, which numpy cannot parse before
    ml_dtypes is loaded) and `<V2` (numpy's own writing of a bf16 array)."""
    values = np.array([1.5, -2.0, 3.25], ml_dtypes.bfloat16)
    np.save(tmp_path / "v2.npy", values)
    with open(tmp_path / "named.npy", "wb") as f:
        from common import storage

        storage.write_npy(f, values)
    assert b"'descr': 'bfloat16'" in (tmp_path / "named.npy").read_bytes()[:80]
    for name in ("named", "v2"):
        script = (
            "import os, sys\n"
            "from pathlib import Path\n"
            "from common import storage\n"
            "from schemas.program import Region\n"
            f"path = Path(os.environ['FOLDER']) / '{name}.npy'\n"
            "before = 'ml_dtypes' in sys.modules\n"
            "meta = storage.tensor_meta(path)\n"
            "got = storage.read_region(path, Region('t', (0,), (3,)))\n"
            "print(before, meta[1], got.tolist() == [1.5, -2.0, 3.25], 'ml_dtypes' in sys.modules)\n"
        )
        assert run_fresh(script, tmp_path) == ["False", "bf16", "True", "True"], name


def test_a_broken_header_is_one_user_error_whether_or_not_ml_dtypes_is_loaded(tmp_path):
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': 'zz'}\n")
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from common import storage\n"
        "from common.errors import UserError\n"
        "for _ in range(2):  # first without ml_dtypes (the header is tried again with it), then with\n"
        "    try:\n"
        "        storage.tensor_meta(Path(os.environ['FOLDER']) / 'bad.npy')\n"
        "    except UserError as err:\n"
        "        print('not-a-valid-npy' if 'not a valid .npy file' in str(err) else err)\n"
    )
    assert run_fresh(script, tmp_path) == ["not-a-valid-npy", "not-a-valid-npy"]
