# The cffi extension (bindings/python/build_ffi.py): its C declarations are
# not Python types, so type checkers see ffi and lib as Any.
from typing import Any

ffi: Any
lib: Any
