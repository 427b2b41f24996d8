"""On the GPU: the persistent TMA ring (compiler/cuda/mainloops/tma_ws/persistent.py) equals the reference
interpreter at every case of persistent_cases, with the plain epilogue and with the TMA store through its
own buffer (the tolerances and the poisoned outputs of test_tma_store_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest
from persistent_cases import CASES, case_id, schedule
from test_tma_store_gpu import check_against_interpreter

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tma_store", [False, True], ids=["plain", "tmast"])
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_persistent_equals_interpreter(case, tma_store):
    name, dims, point, ctas, order = case
    rng = np.random.default_rng(7)
    check_against_interpreter(name, dims, point, schedule(ctas, tma_store, order=order), rng)
