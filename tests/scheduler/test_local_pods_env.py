"""Local CPU pods share the host's cores: BLAS thread counts are divided among them."""

from scheduler.local_pods import BLAS_THREAD_VARIABLES, blas_threads


def test_cores_are_shared_among_cpu_pods(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert blas_threads(4, {}) == {name: "2" for name in BLAS_THREAD_VARIABLES}
    assert blas_threads(16, {}) == {name: "1" for name in BLAS_THREAD_VARIABLES}


def test_gpu_pods_and_user_settings_are_left_alone(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert blas_threads(0, {}) == {}
    assert "OPENBLAS_NUM_THREADS" not in blas_threads(2, {"OPENBLAS_NUM_THREADS": "3"})
