"""pytest setup for the Python bindings: import flashc from python/ without installing it, and make
every output start as NaN (FLASHC_POISON) so an element the library did not write cannot pass.

The library is found the usual way (FLASHC_LIBRARY, the package copy, then the repo's build/):
`make test` builds build/libflashc.so before running these tests.
"""
import os
import sys

os.environ.setdefault("FLASHC_POISON", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def cuda_ready():
    """(usable, reason): torch sees a GPU and libflashc has its CUDA backend. On a GPU machine a
    library without the backend skips the CUDA tests with that reason, unless FLASHC_REQUIRE_CUDA=1
    (the GPU script's setting), which turns the skip into a failure."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "needs a CUDA GPU (none here)"
    import flashc

    if "cuda" not in flashc.backends():
        if os.environ.get("FLASHC_REQUIRE_CUDA") == "1":
            raise RuntimeError(f"FLASHC_REQUIRE_CUDA=1 but {flashc.library_path()} has no usable CUDA backend")
        return False, f"{flashc.library_path()} has no CUDA backend (built without nvcc?)"
    return True, ""
