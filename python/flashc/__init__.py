"""flashc -- exact attention by the FlashAttention-2 algorithm, for numpy arrays and torch tensors.

A thin layer over the C library libflashc (no compiled extension module): arrays are handed to C
as data pointers and strides, on the CPU backend or, for CUDA tensors, the CUDA backend on the
current stream.

    import flashc
    out = flashc.attention(q, k, v, causal=True)            # q (B, Sq, H, D), k/v (B, Sk, H_kv, D)
    out, lse = flashc.attention(q, k, v, return_lse=True)
    dq, dk, dv = flashc.attention_backward(dout, q, k, v, out, lse)   # numpy; torch uses autograd
    out, lse = flashc.merge(out_parts, lse_parts)          # partials over disjoint key sets -> exact

Submodules: flashc.flash_attn (a drop-in for flash-attn 2.x), flashc.transformers (registers
attn_implementation="flashc" with Hugging Face Transformers).
"""
from . import _lib
from ._api import attention, attention_backward, merge
from ._lib import (FlashcError, FlashcMemoryError, FlashcNotImplementedError, FlashcRuntimeError, FlashcValueError,
                   LibraryNotFound, VersionMismatch)

__version__ = f"{_lib.VERSION_MAJOR}.{_lib.VERSION_MINOR}.{_lib.VERSION_PATCH}"


def library_version():
    """(version string, version number) of the libflashc actually loaded."""
    return _lib.version_string().decode(), _lib.version_number()


def backends():
    """The backends this libflashc can run here: a subset of ["ref", "cpu", "cuda"] ("cuda" needs
    a library built with nvcc and a visible device)."""
    import ctypes

    have = []
    for b in (_lib.BACKEND_REF, _lib.BACKEND_CPU, _lib.BACKEND_CUDA):
        ptr = ctypes.c_void_p()
        if _lib.ctx_create(ctypes.byref(ptr), b, 1) == _lib.OK:
            _lib.ctx_free(ptr.value)
            have.append(_lib.BACKEND_NAMES[b])
    return have


def library_path():
    """The path of the libflashc.so this package loaded."""
    return str(_lib.path)


__all__ = ["attention", "attention_backward", "merge", "backends", "library_version", "library_path", "FlashcError", "FlashcValueError",
           "FlashcNotImplementedError", "FlashcMemoryError", "FlashcRuntimeError", "LibraryNotFound",
           "VersionMismatch", "__version__"]
