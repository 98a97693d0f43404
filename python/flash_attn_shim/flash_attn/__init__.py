"""flash_attn -> flashc.flash_attn: flash-attn 2.x's API served by flashc (see flashc/flash_attn)."""
import sys

import flashc.flash_attn as _impl
from flashc.flash_attn import *  # noqa: F401,F403
from flashc.flash_attn import __version__  # noqa: F401

# `import flash_attn.flash_attn_interface` / `flash_attn.bert_padding` get flashc's modules
sys.modules[__name__ + ".flash_attn_interface"] = _impl.flash_attn_interface
sys.modules[__name__ + ".bert_padding"] = _impl.bert_padding
flash_attn_interface = _impl.flash_attn_interface
bert_padding = _impl.bert_padding
