"""The ctypes layer: header mirror, version check, library search, status -> exception mapping,
one ctx per thread."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import flashc
from flashc import _lib
from reference import assert_close, ref_attention

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "include" / "flashc.h"


def test_version_constants_mirror_the_header():
    text = HEADER.read_text()
    ver = [int(re.search(rf"#define FLASHC_VERSION_{p}\s+(\d+)", text).group(1)) for p in ("MAJOR", "MINOR", "PATCH")]
    assert ver == [_lib.VERSION_MAJOR, _lib.VERSION_MINOR, _lib.VERSION_PATCH]
    assert flashc.library_version() == ("%d.%d.%d" % tuple(ver), ver[0] * 10000 + ver[1] * 100 + ver[2])


def test_version_check_rules():
    _lib.check_version(100, 100)
    _lib.check_version(101, 100)  # a newer patch serves an older package
    for loaded in (99, 200, 10100):  # older, another 0.x minor, another major
        with pytest.raises(flashc.VersionMismatch, match="rebuild"):
            _lib.check_version(loaded, 100)
    _lib.check_version(10300, 10200)  # from 1.0 on a newer minor is ABI-compatible
    with pytest.raises(flashc.VersionMismatch):
        _lib.check_version(10100, 10200)


def test_enums_mirror_the_header():
    text = HEADER.read_text()
    for name, val in (("FLASHC_OK", _lib.OK), ("FLASHC_ERR_INVALID_ARG", _lib.ERR_INVALID_ARG),
                      ("FLASHC_ERR_UNSUPPORTED", _lib.ERR_UNSUPPORTED), ("FLASHC_ERR_NO_BACKEND", _lib.ERR_NO_BACKEND),
                      ("FLASHC_ERR_ALLOC", _lib.ERR_ALLOC), ("FLASHC_ERR_WORKSPACE_SMALL", _lib.ERR_WORKSPACE_SMALL),
                      ("FLASHC_ERR_DEVICE", _lib.ERR_DEVICE), ("FLASHC_ERR_INTERNAL", _lib.ERR_INTERNAL),
                      ("FLASHC_DTYPE_F32", _lib.DTYPE_F32), ("FLASHC_DTYPE_F16", _lib.DTYPE_F16),
                      ("FLASHC_DTYPE_BF16", _lib.DTYPE_BF16), ("FLASHC_DTYPE_E4M3", _lib.DTYPE_E4M3),
                      ("FLASHC_BACKEND_AUTO", _lib.BACKEND_AUTO), ("FLASHC_BACKEND_REF", _lib.BACKEND_REF),
                      ("FLASHC_BACKEND_CPU", _lib.BACKEND_CPU), ("FLASHC_BACKEND_CUDA", _lib.BACKEND_CUDA)):
        m = re.search(rf"\b{name}\s*=\s*(-?\d+)", text)
        assert m and int(m.group(1)) == val, name


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to read the C layout")
@pytest.mark.parametrize("struct,cname", [(_lib.AttnDesc, "flashc_attn_desc"), (_lib.KvcacheDesc, "flashc_kvcache_desc"),
                                          (_lib.MergeDesc, "flashc_merge_desc")])
def test_struct_layout_matches_c(tmp_path, struct, cname):
    """Every field's offset and size, and the struct's size, as the C compiler lays them out."""
    fields = [f[0] for f in struct._fields_]
    src = tmp_path / "layout.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include \"flashc.h\"\nint main(void) {\n"
                   f"    printf(\"sizeof %zu\\n\", sizeof({cname}));\n" +
                   "".join(f"    printf(\"{f} %zu %zu\\n\", offsetof({cname}, {f}), "
                           f"sizeof((({cname} *)0)->{f}));\n" for f in fields) + "    return 0;\n}\n")
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", f"-I{REPO / 'include'}", str(src), "-o", str(exe)], check=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    c_fields = [line.split()[0] for line in lines[1:] if line]
    assert c_fields == fields
    assert lines[0] == f"sizeof {ctypes.sizeof(struct)}"
    for line, f in zip(lines[1:], fields):
        d = getattr(struct, f)
        assert line == f"{f} {d.offset} {d.size}"


def test_library_search_env_var():
    env = dict(os.environ, FLASHC_LIBRARY="/nonexistent/libflashc.so")
    r = subprocess.run([sys.executable, "-c", "import flashc"], env=env, capture_output=True, text=True,
                       cwd=str(Path(flashc.__file__).parents[1]))
    assert r.returncode != 0 and "/nonexistent/libflashc.so (absent)" in r.stderr and "LibraryNotFound" in r.stderr


def test_errors_carry_the_c_message():
    q = np.random.default_rng().standard_normal((1, 4, 2, 8)).astype(np.float32)
    with pytest.raises(ValueError, match=r"scale = -1: must be finite and > 0") as e:
        flashc.attention(q, q, q, scale=-1.0)
    assert isinstance(e.value, flashc.FlashcValueError) and e.value.status == _lib.ERR_INVALID_ARG
    with pytest.raises(ValueError, match=r"heads = 2 is not a multiple of heads_kv = 3"):
        k = np.zeros((1, 4, 3, 8), np.float32)
        flashc.attention(q, k, k)
    with pytest.raises(ValueError, match=r"window_left = -2"):
        flashc.attention(q, q, q, window=(-2, 0))
    with pytest.raises(ValueError, match=r"softcap"):
        flashc.attention(q, q, q, softcap=float("nan"))


def test_errors_survive_pickling():
    # DataLoader workers and process pools send exceptions through pickle: the type, status and C
    # message must arrive
    import pickle

    q = np.random.default_rng().standard_normal((1, 4, 2, 8)).astype(np.float32)
    with pytest.raises(ValueError) as e:
        flashc.attention(q, q, q, scale=-1.0)
    e2 = pickle.loads(pickle.dumps(e.value))
    assert type(e2) is type(e.value) and e2.status == e.value.status and str(e2) == str(e.value)


def test_unsupported_is_not_implemented_error():
    ml = pytest.importorskip("ml_dtypes")
    q = np.zeros((1, 4, 2, 8), ml.float8_e4m3fn)
    with pytest.raises(NotImplementedError) as e:
        flashc.attention(q, q, q)
    assert isinstance(e.value, flashc.FlashcNotImplementedError) and e.value.status == _lib.ERR_UNSUPPORTED
    assert len(e.value.message) > len("flashc.attention: ")


def test_one_ctx_per_thread_and_threads_agree():
    rng = np.random.default_rng()
    q = rng.standard_normal((2, 33, 4, 16)).astype(np.float32)
    ref = ref_attention(q, q, q, causal=True)[0]
    results, ctxs = {}, {}
    all_alive = threading.Barrier(4)  # a finished thread frees its ctx, and malloc may reuse the address

    def work(i):
        results[i] = [flashc.attention(q, q, q, causal=True) for _ in range(3)]
        ctxs[i] = _lib.get_ctx(_lib.BACKEND_CPU)
        all_alive.wait()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ctxs.values())) == 4  # one flashc_ctx per calling thread
    for outs in results.values():
        for out in outs:
            assert_close("out", out, ref)


def test_package_version_mirrors_the_header():
    text = (REPO / "python" / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', text, re.M).group(1) == flashc.__version__
    assert flashc.__version__ == "%d.%d.%d" % (_lib.VERSION_MAJOR, _lib.VERSION_MINOR, _lib.VERSION_PATCH)


def test_packed_desc_equals_field_by_field():
    """make_desc writes the struct with one struct.pack_into; it must equal setting each field."""
    from flashc._api import make_desc

    got = make_desc(2, 3, 5, 7, 8, 4, 16, (1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12), 0.25, 1.5, True, 3, -1,
                    0x1000, 9, 0x2000, 0x3000, 0x4000, True, (13, 14, 15), (16, 17, 18), (19, 20, 21), (22, 23, 24))
    want = _lib.AttnDesc()
    want.dtype, want.batch, want.seqlen_q, want.seqlen_k, want.heads, want.heads_kv, want.head_dim = 2, 3, 5, 7, 8, 4, 16
    want.scale, want.softcap, want.causal = 0.25, 1.5, 1
    want.use_window, want.window_left, want.window_right = 1, 3, -1
    want.alibi_slopes, want.alibi_batch_stride, want.deterministic = 0x1000, 9, 1
    want.cu_seqlens_q, want.cu_seqlens_k, want.seqused_k = 0x2000, 0x3000, 0x4000
    for i, name in enumerate(("q", "k", "v", "o", "do", "dq", "dk", "dv")):
        getattr(want, name + "_stride")[:] = (3 * i + 1, 3 * i + 2, 3 * i + 3)
    assert bytes(got) == bytes(want)
    plain = make_desc(0, 1, 4, 4, 2, 2, 8, (0, 0, 0), (0, 0, 0), (0, 0, 0), (0, 0, 0), None, 0.0, False, -1, -1)
    assert plain.use_window == 0 and plain.scale == 0 and not any(plain.reserved)
