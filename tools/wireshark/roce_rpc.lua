-- SPDX-License-Identifier: MIT
--
-- A Wireshark dissector for roce-rpc frames (docs/protocol.md):
--  * over tcp, found by the frame magic "RRPC" at the start of a connection's
--    first segment (a heuristic, so no port needs configuring), frames
--    reassembled across segments;
--  * inside RoCEv2 SEND payloads, after Wireshark's own InfiniBand (BTH)
--    dissection, through its "infiniband.payload" heuristic list: the first
--    packet of each SEND carries the 32-byte header.
--
-- Use: tshark -X lua_script:roce_rpc.lua ..., or copy this file to
-- ~/.local/lib/wireshark/plugins/.  Method names are not on the wire (a
-- REQUEST carries the FNV-1a hash of the name); give the names you want
-- shown in the preference roce_rpc.methods ("add,fail,kv.get"), e.g.
--   tshark -X lua_script:roce_rpc.lua -o roce_rpc.methods:add,fail -r cap.pcapng
--
-- Fields: rrpc.type, rrpc.class, rrpc.flags, rrpc.id, rrpc.arg, rrpc.method_id,
-- rrpc.method, rrpc.status, rrpc.len, rrpc.credits, rrpc.hello.*,
-- rrpc.os.addr/key/len/imm, rrpc.error_text, rrpc.flags.meta, rrpc.meta.size/count,
-- rrpc.meta.key/value (a REQUEST's or RESPONSE's metadata block).

local p = Proto("roce_rpc", "roce-rpc")

local MAGIC = 0x43505252 -- "RRPC", little-endian
local HDR = 32

local types = {
    [1] = "HELLO", [2] = "HELLO_ACK", [3] = "JOIN", [4] = "JOIN_ACK", [5] = "REQUEST",
    [6] = "RESPONSE", [7] = "CREDIT", [8] = "OS_WRITE", [9] = "OS_READ", [10] = "OS_ACK",
    [11] = "ERROR", [12] = "TICKET", [13] = "TICKET_ACK", [14] = "KEEPALIVE", [15] = "CANCEL",
    [16] = "LEND", [17] = "LEND_ACK",
}
local classes = { [0] = "control", [1] = "low_latency", [2] = "bulk", [3] = "background" }

local f = {
    magic = ProtoField.uint32("rrpc.magic", "Magic", base.HEX),
    version = ProtoField.uint8("rrpc.version", "Version"),
    type = ProtoField.uint8("rrpc.type", "Type", base.DEC, types),
    class = ProtoField.uint8("rrpc.class", "Class", base.DEC, classes),
    flags = ProtoField.uint8("rrpc.flags", "Flags", base.HEX),
    notify = ProtoField.bool("rrpc.flags.notify", "Notify", 8, nil, 0x01),
    meta_flag = ProtoField.bool("rrpc.flags.meta", "Metadata", 8, nil, 0x02),
    last_flag = ProtoField.bool("rrpc.flags.last", "Last credit", 8, nil, 0x04),
    meta_size = ProtoField.uint16("rrpc.meta.size", "Metadata block size"),
    meta_count = ProtoField.uint8("rrpc.meta.count", "Metadata entries"),
    meta_key = ProtoField.string("rrpc.meta.key", "Key"),
    meta_value = ProtoField.bytes("rrpc.meta.value", "Value"),
    id = ProtoField.uint64("rrpc.id", "Id"),
    arg = ProtoField.uint64("rrpc.arg", "Arg", base.HEX),
    method_id = ProtoField.uint64("rrpc.method_id", "Method id", base.HEX),
    method = ProtoField.string("rrpc.method", "Method"),
    status = ProtoField.int32("rrpc.status", "Status"),
    lend = ProtoField.int32("rrpc.lend", "Grant change"),
    len = ProtoField.uint32("rrpc.len", "Payload length"),
    credits = ProtoField.uint16("rrpc.credits", "Credits returned"),
    ttl = ProtoField.uint16("rrpc.ttl", "Remaining time code", base.HEX),
    payload = ProtoField.bytes("rrpc.payload", "Payload"),
    h_version = ProtoField.uint8("rrpc.hello.version", "Hello version"),
    h_ncls = ProtoField.uint8("rrpc.hello.nclasses", "Classes"),
    h_credits = ProtoField.uint16("rrpc.hello.credits", "Credits granted"),
    h_maxmsg = ProtoField.uint32("rrpc.hello.max_msg", "Max message"),
    h_cookie = ProtoField.uint64("rrpc.hello.cookie", "Cookie", base.HEX),
    h_rxbuf = ProtoField.uint32("rrpc.hello.rx_buf", "Receive buffer"),
    os_addr = ProtoField.uint64("rrpc.os.addr", "Target address", base.HEX),
    os_key = ProtoField.uint64("rrpc.os.key", "Key", base.HEX),
    os_len = ProtoField.uint32("rrpc.os.len", "Length"),
    os_imm = ProtoField.uint32("rrpc.os.imm", "Immediate", base.HEX),
    text = ProtoField.string("rrpc.error_text", "Reason"),
}
p.fields = f

p.prefs.methods = Pref.string("Method names", "",
                              "Comma-separated method names whose ids are shown by name")

-- FNV-1a, 64 bits, of a method name (docs/protocol.md section 10).
local FNV_BASIS = UInt64(0x84222325, 0xcbf29ce4)
local FNV_PRIME = UInt64(0x000001b3, 0x00000100)
local function fnv1a(s)
    local h = FNV_BASIS
    for i = 1, #s do
        h = h:bxor(UInt64(s:byte(i), 0)) * FNV_PRIME
    end
    return h
end

local names, names_from = {}, nil
local function method_name(id)
    local pref = p.prefs.methods
    if pref ~= names_from then
        names, names_from = {}, pref
        for n in string.gmatch(pref, "[^,%s]+") do
            names[tostring(fnv1a(n))] = n
        end
    end
    return names[tostring(id)]
end

local OS_HDR = 24
local function os_subheader(tvb, off, t)
    if tvb:len() < off + OS_HDR then return end
    local st = t:add(p, tvb(off, OS_HDR), "One-sided sub-header")
    st:add_le(f.os_addr, tvb(off, 8))
    st:add_le(f.os_key, tvb(off + 8, 8))
    st:add_le(f.os_len, tvb(off + 16, 4))
    st:add_le(f.os_imm, tvb(off + 20, 4))
end

-- The metadata block at @off of a REQUEST or RESPONSE flagged 0x02
-- (docs/protocol.md section 10), of which @have bytes are here; its size
-- (0 when it is not all here or is malformed, after marking it).
local function meta_block(tvb, off, have, t)
    if have < 4 then return 0 end
    local size = tvb(off, 2):le_uint()
    local n = tvb(off + 2, 1):uint()
    local mt = t:add(p, tvb(off, math.min(size, have)), "Metadata")
    mt:add_le(f.meta_size, tvb(off, 2))
    mt:add(f.meta_count, tvb(off + 2, 1))
    if size > have then
        mt:append_text(" (truncated: " .. size .. " bytes announced, " .. have .. " here)")
        return 0
    end
    local at = off + 4
    for i = 1, n do
        if at + 3 > off + size then
            mt:append_text(" (malformed: entry " .. i .. " runs past the block)")
            return 0
        end
        local kl = tvb(at, 1):uint()
        local vl = tvb(at + 1, 2):le_uint()
        if at + 3 + kl + vl > off + size then
            mt:append_text(" (malformed: entry " .. i .. " runs past the block)")
            return 0
        end
        local key = kl > 0 and tvb(at + 3, kl):string() or ""
        local e = mt:add(p, tvb(at, 3 + kl + vl), key .. ": " ..
                         (vl > 0 and tvb(at + 3 + kl, vl):string() or ""))
        if kl > 0 then e:add(f.meta_key, tvb(at + 3, kl)) end
        if vl > 0 then e:add(f.meta_value, tvb(at + 3 + kl, vl)) end
        at = at + 3 + kl + vl
    end
    return size
end

-- Dissects one frame at the start of @tvb (the header and what of the
-- payload @tvb holds); returns a one-line summary.
local function frame(tvb, pinfo, tree)
    local ty = tvb(5, 1):uint()
    local cls = tvb(6, 1):uint()
    local plen = tvb(24, 4):le_uint()
    local t = tree:add(p, tvb(0, math.min(tvb:len(), HDR + plen)),
                       "roce-rpc " .. (types[ty] or ("type " .. ty)))
    t:add_le(f.magic, tvb(0, 4))
    t:add(f.version, tvb(4, 1))
    t:add(f.type, tvb(5, 1))
    t:add(f.class, tvb(6, 1))
    local ft = t:add(f.flags, tvb(7, 1))
    ft:add(f.notify, tvb(7, 1))
    ft:add(f.meta_flag, tvb(7, 1))
    ft:add(f.last_flag, tvb(7, 1))
    t:add_le(f.id, tvb(8, 8))
    t:add_le(f.arg, tvb(16, 8))
    t:add_le(f.len, tvb(24, 4))
    t:add_le(f.credits, tvb(28, 2))
    if ty == 5 then -- REQUEST: the caller's remaining time (docs/protocol.md section 10)
        local code = tvb(30, 2):le_uint()
        local units = {1e-6, 64e-6, 4096e-6, 262144e-6}
        local secs = (code % 16384) * units[math.floor(code / 16384) + 1]
        t:add_le(f.ttl, tvb(30, 2)):append_text(code == 0 and " (no deadline)" or
                                                string.format(" (%.3f ms)", secs * 1e3))
    end
    local summary = (types[ty] or ("type " .. ty)) .. " " .. (classes[cls] or cls)
    local have = tvb:len() - HDR
    if have > plen then have = plen end
    local body = HDR -- where the application's bytes start
    if (ty == 5 or ty == 6) and math.floor(tvb(7, 1):uint() / 2) % 2 == 1 then
        local ms = meta_block(tvb, HDR, have, t)
        body = HDR + ms
        have = have - ms
    end
    if ty == 5 then
        local mid = tvb(16, 8):le_uint64()
        t:add_le(f.method_id, tvb(16, 8))
        local name = method_name(mid)
        if name then
            t:add(f.method, tvb(16, 8), name)
            summary = summary .. " " .. name
        else
            summary = summary .. " 0x" .. mid:tohex()
        end
        summary = summary .. " id=" .. tostring(tvb(8, 8):le_uint64())
    elseif ty == 6 or ty == 10 or ty == 11 then
        t:add_le(f.status, tvb(16, 4))
        local st = tvb(16, 4):le_int()
        summary = summary .. " id=" .. tostring(tvb(8, 8):le_uint64()) .. " status=" .. st
        if st ~= 0 and have > 0 then
            t:add(f.text, tvb(body, have))
        elseif ty == 10 and have >= OS_HDR then
            os_subheader(tvb, HDR, t)
        end
    elseif (ty == 1 or ty == 2) and have >= 32 then
        local h = t:add(p, tvb(HDR, 32), "Hello record")
        h:add(f.h_version, tvb(HDR, 1))
        h:add(f.h_ncls, tvb(HDR + 1, 1))
        for i = 0, 3 do
            h:add_le(f.h_credits, tvb(HDR + 2 + 2 * i, 2)):append_text(" (" .. classes[i] .. ")")
        end
        h:add_le(f.h_maxmsg, tvb(HDR + 12, 4))
        h:add_le(f.h_cookie, tvb(HDR + 16, 8))
        h:add_le(f.h_rxbuf, tvb(HDR + 24, 4))
    elseif ty == 16 or ty == 17 then -- LEND: signed change of the grant; LEND_ACK: what it took
        t:add_le(f.lend, tvb(16, 4))
        local d = tvb(16, 4):le_int()
        summary = summary .. (ty == 16 and string.format(" %+d", d) or (" " .. d))
    elseif ty == 8 or ty == 9 then
        os_subheader(tvb, HDR, t)
        summary = summary .. " id=" .. tostring(tvb(8, 8):le_uint64())
    end
    if have > 0 and not (ty == 1 or ty == 2) then
        t:add(f.payload, tvb(body, have))
    end
    return summary
end

local function is_frame(tvb)
    return tvb:len() >= HDR and tvb(0, 4):le_uint() == MAGIC
end

-- ---- tcp: frames reassembled across segments ------------------------------

local function pdu_len(tvb, pinfo, off)
    return HDR + tvb(off + 24, 4):le_uint()
end

local last_packet = -1 -- the packet whose first frame set the info column

local function tcp_pdu(tvb, pinfo, tree)
    pinfo.cols.protocol = "roce-rpc"
    local s = frame(tvb, pinfo, tree)
    if pinfo.number ~= last_packet then
        last_packet = pinfo.number
        pinfo.cols.info = s
    else
        pinfo.cols.info:append("; " .. s)
    end
    return tvb:len()
end

function p.dissector(tvb, pinfo, tree)
    dissect_tcp_pdus(tvb, tree, HDR, pdu_len, tcp_pdu, true)
    return tvb:len()
end

local function tcp_heur(tvb, pinfo, tree)
    if not is_frame(tvb) then return false end
    pinfo.conversation = p -- the rest of this connection goes to p.dissector
    p.dissector(tvb, pinfo, tree)
    return true
end
p:register_heuristic("tcp", tcp_heur)

-- ---- RoCEv2: the payload of a SEND (first or only packet) -----------------

local function ib_heur(tvb, pinfo, tree)
    if not is_frame(tvb) then return false end
    pinfo.cols.protocol = "roce-rpc"
    pinfo.cols.info = frame(tvb, pinfo, tree)
    return true
end
-- The InfiniBand dissector's payload heuristics (present when Wireshark
-- decodes RoCEv2, UDP port 4791, as it does by default).
if not pcall(function() p:register_heuristic("infiniband.payload", ib_heur) end) then
    print("roce_rpc.lua: no infiniband.payload heuristic list: RoCEv2 payloads not decoded")
end
