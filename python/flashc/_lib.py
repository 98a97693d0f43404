"""_lib.py -- the ctypes mirror of include/flashc.h.

Loads libflashc.so, declares the signatures of the C entry points, checks that the library is the
version this package was written against, turns status codes into Python exceptions carrying the
C message, and keeps one flashc_ctx per (backend, device, thread), which is the C library's rule.

Not a wrapper with its own validation: every check of user values happens in C (src/flashc.c); this
file only moves numbers across the boundary.

Where the library is looked for, first hit wins:
  1. $FLASHC_LIBRARY (a path to libflashc.so; if set, nothing else is tried),
  2. flashc/libflashc.so inside this package (`pip install ./python` builds and copies it there),
  3. build/libflashc.so of the repository this package sits in (`make` at the repo root).
"""
import ctypes
import os
import threading
from pathlib import Path

# The header this file mirrors. tests/test_lib.py reads include/flashc.h and fails if these drift.
VERSION_MAJOR, VERSION_MINOR, VERSION_PATCH = 0, 1, 0
VERSION_NUMBER = VERSION_MAJOR * 10000 + VERSION_MINOR * 100 + VERSION_PATCH

# flashc_status
OK = 0
ERR_INVALID_ARG = -1
ERR_UNSUPPORTED = -2
ERR_NO_BACKEND = -3
ERR_ALLOC = -4
ERR_WORKSPACE_SMALL = -5
ERR_DEVICE = -6
ERR_INTERNAL = -7

# flashc_dtype
DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_E4M3 = 0, 1, 2, 3

# flashc_backend
BACKEND_AUTO, BACKEND_REF, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2, 3
BACKEND_NAMES = {BACKEND_AUTO: "auto", BACKEND_REF: "ref", BACKEND_CPU: "cpu", BACKEND_CUDA: "cuda"}

_c_i32, _c_i64, _c_f32, _c_vp = ctypes.c_int32, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
_c_enum = ctypes.c_int  # C enums are int on every ABI the library builds for


class AttnDesc(ctypes.Structure):
    """flashc_attn_desc, field for field (order, types and the reserved tail are the ABI)."""

    _fields_ = [
        ("batch", _c_i32),
        ("seqlen_q", _c_i32),
        ("seqlen_k", _c_i32),
        ("heads", _c_i32),
        ("heads_kv", _c_i32),
        ("head_dim", _c_i32),
        ("dtype", _c_enum),
        ("scale", _c_f32),
        ("softcap", _c_f32),
        ("causal", _c_i32),
        ("window_left", _c_i32),
        ("window_right", _c_i32),
        ("use_window", _c_i32),
        ("alibi_slopes", _c_vp),
        ("alibi_batch_stride", _c_i64),
        ("deterministic", _c_i32),
        ("q_stride", _c_i64 * 3),
        ("k_stride", _c_i64 * 3),
        ("v_stride", _c_i64 * 3),
        ("o_stride", _c_i64 * 3),
        ("do_stride", _c_i64 * 3),
        ("dq_stride", _c_i64 * 3),
        ("dk_stride", _c_i64 * 3),
        ("dv_stride", _c_i64 * 3),
        ("cu_seqlens_q", _c_vp),
        ("cu_seqlens_k", _c_vp),
        ("seqused_k", _c_vp),
        ("block_table", _c_vp),
        ("block_table_stride", _c_i64),
        ("page_size", _c_i32),
        ("num_pages", _c_i32),
        ("q_descale", _c_f32),
        ("k_descale", _c_f32),
        ("v_descale", _c_f32),
        ("reserved32", _c_i32),
        ("reserved", _c_i64 * 19),
    ]


class KvcacheDesc(ctypes.Structure):
    """flashc_kvcache_desc."""

    _fields_ = [
        ("cache_seqlens", _c_vp),
        ("cache_batch_idx", _c_vp),
        ("seqlen_new", _c_i32),
        ("knew_stride", _c_i64 * 3),
        ("vnew_stride", _c_i64 * 3),
        ("rotary_cos", _c_vp),
        ("rotary_sin", _c_vp),
        ("rotary_dim", _c_i32),
        ("rotary_interleaved", _c_i32),
        ("seqlen_ro", _c_i32),
        ("num_splits", _c_i32),
        ("num_cache_rows", _c_i64),
        ("reserved", _c_i64 * 15),
    ]


class MergeDesc(ctypes.Structure):
    """flashc_merge_desc."""

    _fields_ = [
        ("n_parts", _c_i32),
        ("batch", _c_i32),
        ("seqlen", _c_i32),
        ("heads", _c_i32),
        ("head_dim", _c_i32),
        ("part_dtype", _c_enum),
        ("out_dtype", _c_enum),
        ("part_stride", _c_i64 * 4),
        ("out_stride", _c_i64 * 3),
        ("reserved", _c_i64 * 8),
    ]


def _packer(struct_type, stop):
    """A struct.Struct writing the fields of struct_type before `stop` at their C offsets (native byte
    order, explicit padding), so one pack_into fills a description instead of one ctypes setattr per
    field (~25 of them; that difference is most of the Python cost of a tiny call)."""
    codes = {_c_i32: "i", _c_enum: "i", _c_f32: "f", _c_vp: "Q", _c_i64: "q"}
    fmt, at = "=", 0
    for name, ctype in struct_type._fields_:
        if name == stop:
            break
        off = getattr(struct_type, name).offset
        fmt += "x" * (off - at)
        n = getattr(ctype, "_length_", 1)
        fmt += codes[getattr(ctype, "_type_", ctype) if n > 1 else ctype] * n
        at = off + ctypes.sizeof(ctype)
    import struct

    return struct.Struct(fmt)


# batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim, dtype, scale, softcap, causal, window_left,
# window_right, use_window, alibi_slopes, alibi_batch_stride, deterministic, 8 x 3 strides,
# cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, block_table_stride, page_size, num_pages
# (the e4m3 descales after them stay 0, i.e. 1)
DESC_PACK = _packer(AttnDesc, "q_descale")


# ------------------------------------------------------------------------------------------------
# errors


class FlashcError(Exception):
    """An error reported by libflashc. `status` is the flashc_status code, `message` the C text."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message

    def __reduce__(self):  # (args holds the message only: without this, unpickling in another process fails)
        return type(self), (self.status, self.message)


class FlashcValueError(FlashcError, ValueError):
    """FLASHC_ERR_INVALID_ARG: a bad argument (the message names it and says what was expected)."""


class FlashcNotImplementedError(FlashcError, NotImplementedError):
    """FLASHC_ERR_UNSUPPORTED: a valid request this backend or build cannot do (yet)."""


class FlashcMemoryError(FlashcError, MemoryError):
    """FLASHC_ERR_ALLOC: out of host or device memory."""


class FlashcRuntimeError(FlashcError, RuntimeError):
    """FLASHC_ERR_NO_BACKEND, _DEVICE, _INTERNAL, _WORKSPACE_SMALL."""


_EXC = {
    ERR_INVALID_ARG: FlashcValueError,
    ERR_UNSUPPORTED: FlashcNotImplementedError,
    ERR_ALLOC: FlashcMemoryError,
}


class LibraryNotFound(ImportError):
    pass


class VersionMismatch(ImportError):
    pass


# ------------------------------------------------------------------------------------------------
# loading


def _candidates():
    env = os.environ.get("FLASHC_LIBRARY")
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    return [here / "libflashc.so", here.parent.parent / "build" / "libflashc.so"]


def _load():
    tried = []
    for path in _candidates():
        if not path.is_file():
            tried.append(f"{path} (absent)")
            continue
        try:
            return ctypes.CDLL(str(path)), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise LibraryNotFound(
        "flashc: cannot load libflashc.so; tried " + "; ".join(tried) +
        ". Build it with `make` at the repository root, install the package with "
        "`pip install ./python`, or point FLASHC_LIBRARY at a libflashc.so.")


lib, path = _load()


def _sig(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_P_DESC = ctypes.POINTER(AttnDesc)
version_number = _sig("flashc_version_number", ctypes.c_uint)
version_string = _sig("flashc_version_string", ctypes.c_char_p)
status_string = _sig("flashc_status_string", ctypes.c_char_p, _c_enum)
fill_contiguous_strides = _sig("flashc_fill_contiguous_strides", None, _P_DESC)
ctx_create = _sig("flashc_ctx_create", _c_enum, ctypes.POINTER(_c_vp), _c_enum, ctypes.c_int)
ctx_free = _sig("flashc_ctx_free", None, _c_vp)
ctx_backend = _sig("flashc_ctx_backend", _c_enum, _c_vp)
ctx_last_error = _sig("flashc_ctx_last_error", ctypes.c_char_p, _c_vp)
supports = _sig("flashc_supports", _c_enum, _c_vp, _P_DESC)
fwd_workspace_size = _sig("flashc_fwd_workspace_size", ctypes.c_size_t, _c_vp, _P_DESC)
bwd_workspace_size = _sig("flashc_bwd_workspace_size", ctypes.c_size_t, _c_vp, _P_DESC)
# flashc_fwd(ctx, d, q, k, v, o, lse, workspace, workspace_size, stream)
fwd = _sig("flashc_fwd", _c_enum, _c_vp, _P_DESC, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp, ctypes.c_size_t, _c_vp)
# flashc_bwd(ctx, d, q, k, v, o, lse, dout, dq, dk, dv, workspace, workspace_size, stream)
bwd = _sig("flashc_bwd", _c_enum, _c_vp, _P_DESC, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp,
           _c_vp, ctypes.c_size_t, _c_vp)
_P_KV = ctypes.POINTER(KvcacheDesc)
kvcache_workspace_size = _sig("flashc_kvcache_workspace_size", ctypes.c_size_t, _c_vp, _P_DESC, _P_KV)
# flashc_fwd_kvcache(ctx, d, kv, q, k_cache, v_cache, k_new, v_new, o, lse, workspace, workspace_size, stream)
fwd_kvcache = _sig("flashc_fwd_kvcache", _c_enum, _c_vp, _P_DESC, _P_KV, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp, _c_vp,
                   _c_vp, _c_vp, ctypes.c_size_t, _c_vp)
# flashc_merge(ctx, m, out_parts, lse_parts, out, lse, stream)
merge = _sig("flashc_merge", _c_enum, _c_vp, ctypes.POINTER(MergeDesc), _c_vp, _c_vp, _c_vp, _c_vp, _c_vp)


def check_version(loaded, built=VERSION_NUMBER):
    """Raise VersionMismatch unless a library of version `loaded` serves a package built for `built`.

    The ABI only grows (new fields come from `reserved`, enums are append-only), so a newer library
    of the same major version is fine; while the major version is 0, the minor must match too.
    """
    lmaj, lmin = loaded // 10000, loaded // 100 % 100
    bmaj, bmin = built // 10000, built // 100 % 100
    ok = lmaj == bmaj and (lmin == bmin if bmaj == 0 else lmin >= bmin) and loaded >= built
    if not ok:
        raise VersionMismatch(
            f"flashc: {path} is libflashc {lmaj}.{lmin}.{loaded % 100} but this package was written for "
            f"{bmaj}.{bmin}.{built % 100}; rebuild the library (make) or reinstall the package")


check_version(version_number())


# ------------------------------------------------------------------------------------------------
# status -> exception


def raise_status(ctx, status, what="flashc"):
    """Raise the exception for a failed call on ctx (whose last error has the C message)."""
    msg = ctx_last_error(ctx).decode(errors="replace") if ctx else ""
    kind = status_string(status).decode()
    text = f"{what}: {msg}" if msg else f"{what}: {kind}"
    raise _EXC.get(status, FlashcRuntimeError)(status, text)


# ------------------------------------------------------------------------------------------------
# contexts: one per (backend, device, thread)


class _Ctx:
    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self):
        # runs when the owning thread's threading.local is torn down; ctx_free accepts NULL
        try:
            ctx_free(self.ptr)
        except Exception:
            pass


_tls = threading.local()


def get_ctx(backend, device=0):
    """The calling thread's flashc_ctx for `backend` (created on first use). For CUDA the caller
    makes `device` current first: a CUDA ctx binds to the device current at creation."""
    ctxs = getattr(_tls, "ctxs", None)
    if ctxs is None:
        ctxs = _tls.ctxs = {}
    c = ctxs.get((backend, device))
    if c is None:
        ptr = _c_vp()
        st = ctx_create(ctypes.byref(ptr), backend, 0)
        if st != OK:
            name = BACKEND_NAMES.get(backend, str(backend))
            why = f"{status_string(st).decode()} ({ctx_last_error(None).decode(errors='replace')})"
            raise _EXC.get(st, FlashcRuntimeError)(
                st, f"flashc: cannot create a {name} context from {path}: {why}")
        c = ctxs[(backend, device)] = _Ctx(ptr.value)
    return c.ptr
