#!/bin/sh
# tests/modules/needed.sh LIBROCE_RPC_SO PC_DIR: libroce_rpc.so names no
# heavy dependency (readelf -d NEEDED): libibverbs, librdmacm and
# libmicrohttpd are linked by the loadable modules only; and roce_rpc.pc
# (in PC_DIR) asks for none of them, not even for a static link.
set -u
LIB=$1
PCDIR=$2
fail=0
needed=$(readelf -d "$LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "NEEDED of $LIB: $needed"
for dep in libibverbs librdmacm libmicrohttpd; do
  case " $needed" in *" $dep"*) echo "FAIL - $LIB needs $dep"; fail=1 ;; esac
done
# Only the project's .pc directory: a dependency's .pc is not needed.
flags=$(PKG_CONFIG_LIBDIR=$PCDIR pkg-config --cflags --libs --static roce_rpc 2>&1) ||
  { echo "FAIL - pkg-config --static roce_rpc: $flags"; fail=1; }
echo "pkg-config --cflags --libs --static roce_rpc: $flags"
for f in -libverbs -lrdmacm -lmicrohttpd; do
  case " $flags " in *" $f "*) echo "FAIL - roce_rpc.pc names $f"; fail=1 ;; esac
done
[ $fail = 0 ] && echo "ok - no verbs or HTTP library in NEEDED or roce_rpc.pc"
exit $fail
