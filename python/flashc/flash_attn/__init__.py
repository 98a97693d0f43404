"""flashc.flash_attn -- a drop-in for the flash-attn 2.x Python package, running on flashc.

    from flashc.flash_attn import flash_attn_func        # explicit
    import flashc.flash_attn; flashc.flash_attn.install()  # then `import flash_attn` is this module
    # or: pip install ./python/flash_attn_shim, a package named flash_attn that re-exports this one

Functions, signatures, defaults and returns follow flash-attn 2.8; see flash_attn_interface.py for
what is not supported yet (dropout; cache_leftpad with block_table) -- those raise NotImplementedError.
"""
import sys

from . import bert_padding, flash_attn_interface
from .flash_attn_interface import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                                   flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                                   flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache)

# The flash-attn release whose API this mirrors, tagged with flashc's version (PEP 440 local label).
__version__ = "2.8.3+flashc.0.1.0"


def install():
    """Make `import flash_attn`, `flash_attn.flash_attn_interface` and `flash_attn.bert_padding`
    resolve to flashc's implementation in this process (replacing a real flash-attn if it was
    imported before). Returns the module."""
    me = sys.modules[__name__]
    sys.modules["flash_attn"] = me
    sys.modules["flash_attn.flash_attn_interface"] = flash_attn_interface
    sys.modules["flash_attn.bert_padding"] = bert_padding
    return me


__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
           "bert_padding", "flash_attn_interface", "install", "__version__"]
