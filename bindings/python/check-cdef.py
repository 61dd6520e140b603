#!/usr/bin/python3
"""Fails when the cffi declarations drift from the public headers.

cffi compiles the extension against the real headers, so a declaration in
rrpc_cdef.h / tensor_cdef.h that disagrees with them (a changed signature,
a struct field) is already a compile error.  What the compiler cannot see
is a function the headers gained that the bindings never declared, or one
they declare that the headers lost.  Every RRPC_API function of
include/roce_rpc/*.h must be declared in the cdefs or listed below with the
reason it is not bound.

    check-cdef.py [REPO]
"""
import glob
import os
import re
import sys

# function -> why the Python package does not bind it
NOT_BOUND = {
    "rrpc_conn_stats": "Context.stats() has the per-peer sums (rrpc_ctx_peer_stats); a "
                       "connection's own figures are C only",
    "rrpc_call_sync": "Conn.call waits in slices (call_wait.h) that KeyboardInterrupt can end; "
                      "a blocking C wait cannot be interrupted",
    "rrpc_read_sync": "as rrpc_call_sync",
    "rrpc_call_sync_meta": "as rrpc_call_sync (Conn.call returns a Reply with .metadata)",
    "rrpc_request_meta_get": "Request.metadata is a mapping of all of them (rrpc_request_meta)",
    "rrpc_meta_find": "metadata are Python mappings",
    "rrpc_write_sync": "as rrpc_call_sync",
    "rrpc_tensor_send_with_sync": "as rrpc_call_sync",
    "rrpc_tensor_send": "deprecated in 0.2: the bindings use rrpc_tensor_send_with",
    "rrpc_tensor_send_sync": "deprecated in 0.2 (rrpc_tensor_send_with_sync)",
    "rrpc_tensor_serve_ex": "deprecated in 0.2: the bindings use rrpc_tensor_serve_with",
    "rrpc_kv_transfer_sync": "as rrpc_call_sync",
    "rrpc_connect_with_sync": "Context.connect waits on connect_async's Future",
    "rrpc_connect": "connect_async uses rrpc_connect_with (ticket, source, timeout)",
    "rrpc_pack": "roce_rpc.pack_args packs the same bytes with the msgpack package "
                 "(tests/test_pack.py compares them with rrpc_pack)",
    "rrpc_unpack": "as rrpc_pack",
    "rrpc_conn_user": "Python keeps its own objects per connection",
    "rrpc_conn_set_user": "as rrpc_conn_user",
    "rrpc_config_print": "writes to a FILE *; Context(config=) takes the names it prints",
    "rrpc_tensor_init": "numpy arrays describe themselves (dtype, shape, strides)",
    "rrpc_tensor_numel": "numpy's size",
    "rrpc_kv_pool_page": "KvPool.page gives numpy views",
    "rrpc_ctx_require_ticket": "servers take tickets through Broker.gate (rrpc_broker_gate)",
    "rrpc_ctx_ticket_principal": "called by a C ticket verifier (rrpc_broker_gate's)",
    "rrpc_service_call_sync": "Service.call borrows the connection and waits on a Future",
    "rrpc_ticket_issue": "tickets are rrpcd's to issue; clients get them from lookup()",
    "rrpc_ticket_present": "as rrpc_ticket_issue; lookup() presents with the handle's principal",
    "rrpc_ticket_key_load": "signing keys are rrpcd's (ticket_key)",
    "rrpc_ticket_key_new": "as rrpc_ticket_key_load",
    "rrpc_ticket_key_public": "as rrpc_ticket_key_load",
    "rrpc_ticket_key_free": "as rrpc_ticket_key_load",
    "rrpc_ticket_key_id": "as rrpc_ticket_key_load",
    "rrpc_ticket_public_key_load": "as rrpc_ticket_key_load",
    "rrpc_ticket_peek": "as rrpc_ticket_issue",
    "rrpc_ticket_peek_instance": "as rrpc_ticket_issue",
    "rrpc_ticket_verifier_create": "servers verify through Broker.gate, which keeps the verifier",
    "rrpc_ticket_verifier_destroy": "as rrpc_ticket_verifier_create",
    "rrpc_ticket_verifier_set_instance": "as rrpc_ticket_verifier_create",
    "rrpc_ticket_verifier_set_keys": "as rrpc_ticket_verifier_create",
    "rrpc_ticket_verify": "as rrpc_ticket_verifier_create",
    "rrpc_ticket_verify_cb": "as rrpc_ticket_verifier_create",
}


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    here = os.path.join(repo, "bindings", "python")
    public = {}
    for path in sorted(glob.glob(os.path.join(repo, "include", "roce_rpc", "*.h"))):
        text = open(path).read()
        for m in re.finditer(r"RRPC_API\s+[^;{]*?\b(rrpc_\w+)\s*\(", text):
            public[m.group(1)] = os.path.basename(path)
    cdef = "".join(open(os.path.join(here, n)).read()
                   for n in ("rrpc_cdef.h", "tensor_cdef.h", "broker_cdef.h"))
    cdef = re.sub(r"/\*.*?\*/", "", cdef, flags=re.S)
    declared = set(re.findall(r"\b(rrpc_\w+)\s*\(", cdef))
    problems = []
    for name, header in sorted(public.items()):
        reason = NOT_BOUND.get(name)
        if name in declared and name in NOT_BOUND:
            problems.append("%s is bound now: remove it from NOT_BOUND in %s" % (name, __file__))
        elif name not in declared and not reason:
            problems.append("%s (%s) is public but not in the cdefs: declare it in "
                            "bindings/python/*_cdef.h and bind it, or list it in NOT_BOUND with "
                            "the reason" % (name, header))
    for name in sorted(declared - set(public)):
        problems.append("%s is declared in the cdefs but no public header has it" % name)
    for name in sorted(set(NOT_BOUND) - set(public)):
        problems.append("%s is listed in NOT_BOUND but no public header has it" % name)
    for p in problems:
        print("check-cdef: " + p, file=sys.stderr)
    bound = len(declared & set(public))
    print("check-cdef: %d of %d public functions bound, %d not bound with a reason"
          % (bound, len(public), len(public) - bound))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
