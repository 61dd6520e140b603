#!/bin/bash
# tools/doctor/fake-dcb.sh: a stand-in for dcb(8) in test-host.sh (RRPC_DOCTOR_DCB=this), for a
# host whose netdevs have no DCB.  It prints outputs recorded in iproute2's man pages (EXAMPLE &
# USAGE of dcb-pfc(8), dcb-ets(8) and dcb-app(8), the table after "replace ... 24:4"), not
# made-up ones.  FAKE_DCB_PFC=garbage makes `pfc show` print something dcb never prints.
args=" $* "
case "$args" in
  *" pfc show "*)
    if [ "${FAKE_DCB_PFC:-}" = garbage ]; then echo "prio-pfc 0:sometimes"; exit 0; fi
    echo "pfc-cap 8 macsec-bypass off delay 4096"
    echo "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:on 7:on" ;;
  *" ets show "*)
    echo "prio-tc 0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7"
    echo "tc-tsa 0:ets 1:ets 2:ets 3:strict 4:strict 5:strict 6:strict 7:strict"
    echo "tc-bw 0:33 1:33 2:34 3:0 4:0 5:0 6:0 7:0" ;;
  *" app show "*)
    echo "dscp-prio 0:0 24:4 48:6" ;;
  *) echo "fake-dcb: unexpected arguments:$args" >&2; exit 1 ;;
esac
