-- packetexpress.lua: Wireshark dissectors for PacketExpress.
--
--   pxcaravan  PX-caravans (docs/caravan.md, crates/px-caravan/src/lib.rs):
--              a UDP datagram whose outer IP DSCP is the caravan codepoint
--              and whose payload is a sequence of records, each a complete
--              inner UDP header and payload.
--   fpmtud     F-PMTUD (docs/fpmtud.md, crates/px-pmtud/src/fpmtud/wire.rs):
--              the reference tool's legacy probe ("FPMT" + padding) and its
--              4-byte reply, and PacketExpress's extended, versioned format
--              (probe, confirmation probe, report) with nonces.
--
-- The checks below mirror the Rust parsers byte for byte, in the same order,
-- and name each refusal with the reason the Rust code counts it under
-- (px_caravan::Malformed::name(), px_pmtud::fpmtud::wire::ParseError).
--
-- Install: copy this file into a Wireshark Lua plugin folder (see
-- contrib/wireshark/README.md) or run
--   tshark -X lua_script:contrib/wireshark/packetexpress.lua ...
-- Tested with tshark 4.0.17 (Debian 12).

local VERSION = "1.0"
set_plugin_info({
    version = VERSION,
    description = "PacketExpress PX-caravan and F-PMTUD dissectors",
    repository = "contrib/wireshark in the PacketExpress repository",
})

---------------------------------------------------------------------------
-- Shared helpers
---------------------------------------------------------------------------

-- One's complement sum (RFC 1071) of a Lua string, added to acc (unfolded).
local function sum_string(s, acc)
    local n = #s
    local i = 1
    while i < n do
        local a, b = s:byte(i, i + 1)
        acc = acc + a * 256 + b
        i = i + 2
    end
    if i == n then
        acc = acc + s:byte(i) * 256
    end
    return acc
end

local function fold(acc)
    while acc > 0xffff do
        acc = (acc % 0x10000) + math.floor(acc / 0x10000)
    end
    return acc
end

-- Pseudo-header sum for a UDP datagram of `len` bytes (RFC 768 / RFC 8200 §8.1).
local function pseudo_sum(ip, len)
    local acc = sum_string(ip.src, 0)
    acc = sum_string(ip.dst, acc)
    if ip.version == 4 then
        return acc + 17 + len
    end
    return acc + math.floor(len / 0x10000) + (len % 0x10000) + 17
end

-- The checksum field value that makes a UDP datagram verify: `bytes` is the
-- datagram with its checksum field read as zero (header_sum excludes it).
local function udp_checksum(pseudo, header_sum, payload)
    local c = 0xffff - fold(sum_string(payload, pseudo + header_sum))
    if c == 0 then
        c = 0xffff
    end
    return c
end

local function last(field)
    local all = { field() }
    return all[#all]
end

-- Every instance of a field whose offset lies after `after` (same packet).
local function any_after(field, after)
    for _, fi in ipairs({ field() }) do
        if fi.offset > after then
            return fi
        end
    end
    return nil
end

local f_ip_src = Field.new("ip.src")
local f_ip_dst = Field.new("ip.dst")
local f_ip_dscp = Field.new("ip.dsfield.dscp")
local f_ip_mf = Field.new("ip.flags.mf")
local f_ip_fragoff = Field.new("ip.frag_offset")
local f_ip6_src = Field.new("ipv6.src")
local f_ip6_dst = Field.new("ipv6.dst")
local f_ip6_dscp = Field.new("ipv6.tclass.dscp")
local f_ip6_frag = Field.new("ipv6.fraghdr.offset")
local f_udp_checksum = Field.new("udp.checksum")
local f_icmp_type = Field.new("icmp.type")
local f_icmp6_type = Field.new("icmpv6.type")

-- The IP header directly carrying the UDP datagram being dissected (the
-- innermost one): version, DSCP, raw addresses, and whether it is a
-- fragment (IPv4 MF or offset, or an IPv6 fragment header).
local function enclosing_ip()
    local s4, s6 = last(f_ip_src), last(f_ip6_src)
    if s4 and (not s6 or s4.offset > s6.offset) then
        local mf, off, dscp = last(f_ip_mf), last(f_ip_fragoff), last(f_ip_dscp)
        return {
            version = 4,
            src = s4.range:raw(),
            dst = last(f_ip_dst).range:raw(),
            dscp = dscp and dscp.value,
            fragment = (mf ~= nil and mf.value) or (off ~= nil and off.value ~= 0),
        }
    elseif s6 then
        local dscp = last(f_ip6_dscp)
        return {
            version = 6,
            src = s6.range:raw(),
            dst = last(f_ip6_dst).range:raw(),
            dscp = dscp and dscp.value,
            fragment = any_after(f_ip6_frag, s6.offset) ~= nil,
        }
    end
    return nil
end

-- A UDP header quoted inside an ICMP error is not a datagram the gateway
-- would open.
local function inside_icmp_error()
    return last(f_icmp_type) ~= nil or last(f_icmp6_type) ~= nil
end

---------------------------------------------------------------------------
-- PX-caravan
---------------------------------------------------------------------------

local caravan = Proto("pxcaravan", "PacketExpress PX-caravan")

local RECORD_HEADER_LEN = 8
local DEFAULT_DSCP = 11 -- px_caravan::DEFAULT_DSCP = 0b00_1011

local checksum_status = { [0] = "unverified", [1] = "good", [2] = "bad", [3] = "zero (none)" }

local cf = {
    dscp = ProtoField.uint8("pxcaravan.dscp", "Caravan DSCP", base.DEC, nil, nil,
        "DSCP of the outer IP header (the caravan codepoint)"),
    checksum_status = ProtoField.uint8("pxcaravan.checksum.status", "Outer UDP checksum status", base.DEC,
        checksum_status, nil,
        "Outer UDP checksum over the whole caravan: 0 unverified, 1 good, 2 bad, 3 zero (allowed over IPv4 only)"),
    checksum_calculated = ProtoField.uint16("pxcaravan.checksum.calculated", "Outer UDP checksum (calculated)",
        base.HEX, nil, nil, "The outer UDP checksum the caravan should carry"),
    records = ProtoField.uint16("pxcaravan.records", "Records", base.DEC, nil, nil,
        "Records (inner UDP datagrams) before the caravan's first error: all of them when it is well formed"),
    malformed = ProtoField.string("pxcaravan.malformed", "Malformed",
        "Why the gateway would refuse this caravan whole: empty, truncated, bad_length, overrun, "
            .. "port_mismatch or checksum (px_caravan::Malformed::name)"),
    record = ProtoField.none("pxcaravan.record", "Record", "One record: a complete inner UDP datagram"),
    rec_index = ProtoField.uint16("pxcaravan.record.index", "Index", base.DEC, nil, nil,
        "Position of the record in the caravan, from 1"),
    rec_offset = ProtoField.uint16("pxcaravan.record.offset", "Offset", base.DEC, nil, nil,
        "Byte offset of the record in the outer UDP payload (the offset Rust errors report)"),
    rec_srcport = ProtoField.uint16("pxcaravan.record.srcport", "Source port", base.DEC, nil, nil,
        "Inner UDP source port (must equal the outer one)"),
    rec_dstport = ProtoField.uint16("pxcaravan.record.dstport", "Destination port", base.DEC, nil, nil,
        "Inner UDP destination port (must equal the outer one)"),
    rec_length = ProtoField.uint16("pxcaravan.record.length", "Length", base.DEC, nil, nil,
        "Inner UDP length: 8 + payload length"),
    rec_checksum = ProtoField.uint16("pxcaravan.record.checksum", "Checksum", base.HEX, nil, nil,
        "The original datagram's own UDP checksum, unchanged (0 = none; over IPv6 the gateway fills it in)"),
    rec_checksum_status = ProtoField.uint8("pxcaravan.record.checksum.status", "Checksum status", base.DEC,
        checksum_status, nil,
        "Inner checksum against the pseudo-header (outer addresses, 17, record length): "
            .. "0 unverified, 1 good, 2 bad, 3 zero"),
    rec_checksum_calculated = ProtoField.uint16("pxcaravan.record.checksum.calculated", "Checksum (calculated)",
        base.HEX, nil, nil, "The inner UDP checksum the record should carry"),
    rec_payload_len = ProtoField.uint16("pxcaravan.record.payload_len", "Payload length", base.DEC, nil, nil,
        "Length of the inner datagram's payload (record length - 8)"),
    rec_payload = ProtoField.bytes("pxcaravan.record.payload", "Payload", base.NONE,
        "The inner datagram's payload (what the application receives)"),
    trailing = ProtoField.bytes("pxcaravan.unparsed", "Unparsed bytes", base.NONE,
        "Bytes after a structural error; a caravan is refused whole, so they carry no records"),
}
caravan.fields = cf

local function malformed_expert(reason, what)
    return ProtoExpert.new("pxcaravan.malformed." .. reason, "Malformed caravan (" .. reason .. "): " .. what,
        expert.group.MALFORMED, expert.severity.ERROR)
end

local ce = {
    empty = malformed_expert("empty", "no records"),
    truncated = malformed_expert("truncated", "fewer than 8 bytes where a record header starts"),
    bad_length = malformed_expert("bad_length", "a record length below 8"),
    overrun = malformed_expert("overrun", "a record runs past the end"),
    port_mismatch = malformed_expert("port_mismatch", "a record of another flow"),
    checksum = malformed_expert("checksum", "the outer UDP checksum fails, or is zero over IPv6"),
    rec_bad_checksum = ProtoExpert.new("pxcaravan.record.bad_checksum", "Inner UDP checksum does not verify",
        expert.group.CHECKSUM, expert.severity.WARN),
    rec_zero_v6 = ProtoExpert.new("pxcaravan.record.zero_checksum_v6",
        "Zero inner checksum over IPv6: the gateway fills it in when the datagram leaves",
        expert.group.PROTOCOL, expert.severity.NOTE),
    single = ProtoExpert.new("pxcaravan.single",
        "Caravan of one record (valid, but the gateway never builds one)",
        expert.group.PROTOCOL, expert.severity.CHAT),
}
caravan.experts = {
    ce.empty, ce.truncated, ce.bad_length, ce.overrun, ce.port_mismatch, ce.checksum,
    ce.rec_bad_checksum, ce.rec_zero_v6, ce.single,
}

local PAYLOAD_FIELD, PAYLOAD_DATA, PAYLOAD_PORTS = 0, 1, 2

caravan.prefs.heuristic = Pref.bool("Detect caravans by DSCP (heuristic)", true,
    "Claim UDP datagrams whose outer DSCP is the caravan codepoint (not IP fragments, "
        .. "not inside ICMP errors). Without it, use Decode As (udp.port) to force the dissector.")
caravan.prefs.dscp = Pref.uint("Caravan DSCP", DEFAULT_DSCP,
    "The caravan codepoint (caravan_dscp in the gateway configuration; default 11 = 001011)")
caravan.prefs.claim_malformed = Pref.bool("Claim DSCP-marked datagrams that do not parse", true,
    "The gateway treats every non-fragment UDP datagram carrying the codepoint as a caravan and "
        .. "drops it whole if it does not parse. On: such datagrams are shown as malformed caravans. "
        .. "Off: the heuristic claims only datagrams whose records tile the payload.")
caravan.prefs.check_checksum = Pref.bool("Verify the outer UDP checksum", true,
    "Verify the outer checksum as the gateway does (a failure is the malformed reason 'checksum'). "
        .. "Turn off for captures taken where checksum offload leaves checksums unfilled.")
caravan.prefs.check_inner = Pref.bool("Verify each record's inner UDP checksum", true,
    "Verify each record's own checksum against the pseudo-header (outer addresses, record length)")
caravan.prefs.payload = Pref.enum("Record payloads", PAYLOAD_DATA,
    "How each record's payload is shown besides the pxcaravan.record.payload field: "
        .. "'Field only'; 'As data' (data.data); 'By record ports': handed to the dissector the udp.port "
        .. "table has for the record's ports (lower first, as UDP does), else as data",
    {
        { 1, "Field only", PAYLOAD_FIELD },
        { 2, "As data", PAYLOAD_DATA },
        { 3, "By record ports", PAYLOAD_PORTS },
    }, false)

local data_dissector = Dissector.get("data")
local udp_port_table = DissectorTable.get("udp.port")

local function dissect_record_payload(ptvb, pinfo, tree, srcport, dstport)
    local mode = caravan.prefs.payload
    if mode == PAYLOAD_FIELD or ptvb:len() == 0 then
        return
    end
    if mode == PAYLOAD_PORTS then
        local lo, hi = math.min(srcport, dstport), math.max(srcport, dstport)
        for _, port in ipairs({ lo, hi }) do
            local d = udp_port_table:get_dissector(port)
            -- Not ourselves (Decode As may have put pxcaravan on the port).
            if d ~= nil and tostring(d):lower() ~= "pxcaravan" then
                local ok = pcall(function() d:call(ptvb, pinfo, tree) end)
                if ok then
                    return
                end
            end
        end
    end
    data_dissector:call(ptvb, pinfo, tree)
end

-- Mirrors px_caravan::Caravan::parse(payload, Some((sport, dport))) without
-- side effects: the first error's reason, or nil and the record count.
local function caravan_parse(tvb, sport, dport)
    local len = tvb and tvb:len() or 0
    local off, count = 0, 0
    while off < len do
        local rest = len - off
        if rest < RECORD_HEADER_LEN then
            return "truncated", count
        end
        local rlen = tvb(off + 4, 2):uint()
        if rlen < RECORD_HEADER_LEN then
            return "bad_length", count
        end
        if rlen > rest then
            return "overrun", count
        end
        if tvb(off, 2):uint() ~= sport or tvb(off + 2, 2):uint() ~= dport then
            return "port_mismatch", count
        end
        off = off + rlen
        count = count + 1
    end
    if count == 0 then
        return "empty", 0
    end
    return nil, count
end

-- The outer UDP checksum as px-gateway's unpack checks it (zero is allowed
-- over IPv4 only): the checksum, its status (0 unverified, 1 good, 2 bad,
-- 3 zero) and the expected value when computed; status nil without an IP
-- header or UDP checksum.
local function outer_checksum(tvb, udp, ip)
    local csum = udp.checksum
    if ip == nil or csum == nil then
        return nil, nil, nil
    end
    if csum == 0 then
        return csum, 3, nil
    end
    -- tvb is nil for an empty caravan (the UDP dissector hands nothing on).
    local payload = ""
    if tvb ~= nil then
        if tvb:len() ~= (udp.payload_len or tvb:reported_len()) then
            return csum, 0, nil -- cut by the capture's snap length
        end
        payload = tvb:raw()
    end
    if not caravan.prefs.check_checksum then
        return csum, 0, nil
    end
    local udp_len = #payload + 8
    local want = udp_checksum(pseudo_sum(ip, udp_len), udp.sport + udp.dport + udp_len, payload)
    return csum, (want == csum) and 1 or 2, want
end

-- Whether the gateway would refuse the caravan (checksum first, then
-- Caravan::parse): the first reason, or nil.
local function caravan_refusal(tvb, udp, ip)
    if tvb ~= nil and tvb:len() ~= (udp.payload_len or tvb:reported_len()) then
        return nil -- cut by the capture's snap length: cannot tell
    end
    local _, status = outer_checksum(tvb, udp, ip)
    if status == 2 or (status == 3 and ip.version == 6) then
        return "checksum"
    end
    return (caravan_parse(tvb, udp.sport, udp.dport))
end

-- The outer UDP header as the UDP dissector left it for us (payload_len
-- nil: the payload tvb's reported length).
local function outer_udp(pinfo)
    local fi = last(f_udp_checksum)
    return { sport = pinfo.src_port, dport = pinfo.dst_port, checksum = fi and fi.value }
end

-- Frame number of the last caravan dissected, for the postdissector.
local claimed_frame = nil

-- tvb: the outer UDP payload (nil: empty), perhaps cut by the capture's
-- snap length; udp: outer_udp(); ip:
-- enclosing_ip() or nil (then no checksum can be verified).
local function dissect_caravan(tvb, pinfo, tree, udp, ip)
    claimed_frame = pinfo.number
    local sport, dport = udp.sport, udp.dport
    local len = tvb and tvb:len() or 0
    pinfo.cols.protocol = "PX-caravan"
    local root
    if tvb ~= nil then
        root = tree:add(caravan, tvb(), "PacketExpress PX-caravan")
    else
        root = tree:add(caravan, "PacketExpress PX-caravan")
    end
    if ip and ip.dscp then
        root:add(cf.dscp, ip.dscp):set_generated()
    end
    local reasons = {}

    -- 1. The outer checksum, checked first as the gateway does.
    local csum, status, want = outer_checksum(tvb, udp, ip)
    if status ~= nil then
        if want ~= nil then
            root:add(cf.checksum_calculated, want):set_generated()
        end
        if status == 3 and ip.version == 6 then
            table.insert(reasons, "checksum")
            root:add_proto_expert_info(ce.checksum,
                "Malformed caravan (checksum): zero outer UDP checksum over IPv6 (RFC 8200 section 8.1)")
        elseif status == 2 then
            table.insert(reasons, "checksum")
            root:add_proto_expert_info(ce.checksum, string.format(
                "Malformed caravan (checksum): outer UDP checksum 0x%04x does not verify, expected 0x%04x "
                    .. "(or checksum offload at the capture point)", csum, want))
        end
        root:add(cf.checksum_status, status):set_generated()
    end

    -- 2. The records, exactly as Caravan::parse walks them; the first
    -- structural error or port mismatch is the caravan's reason. After a
    -- port mismatch the lengths still tile, so the walk goes on for display.
    -- A capture cut by its snap length: the walk stops, without a verdict,
    -- where the captured bytes end.
    local reported = udp.payload_len or (tvb and tvb:reported_len()) or 0
    local incomplete = false
    local off, count, index = 0, 0, 0
    local structural = nil
    while off < reported do
        local rest = reported - off
        local cut = off + math.min(rest, RECORD_HEADER_LEN) > len -- header not captured
        if not cut and rest >= RECORD_HEADER_LEN then
            -- A record that fits the datagram but not the captured bytes.
            local rlen = tvb(off + 4, 2):uint()
            cut = rlen >= RECORD_HEADER_LEN and rlen <= rest and off + rlen > len
        end
        if cut then
            incomplete = true
            root:add(cf.trailing, tvb(off, len - off)):append_text(string.format(
                " [capture cut at byte %d of %d: the rest of the caravan was not captured]", len, reported))
            off = reported
            break
        end
        index = index + 1
        if rest < RECORD_HEADER_LEN then
            local item = root:add(cf.record, tvb(off, rest))
            item:set_text(string.format("Record %d (truncated header)", index))
            item:add(cf.rec_index, index):set_generated()
            item:add(cf.rec_offset, off):set_generated()
            structural = structural or "truncated"
            item:add_proto_expert_info(ce.truncated, string.format(
                "Malformed caravan (truncated): record at byte %d: %d bytes left, a record header needs 8",
                off, rest))
            off = len
            break
        end
        local rs, rd = tvb(off, 2):uint(), tvb(off + 2, 2):uint()
        local rlen = tvb(off + 4, 2):uint()
        local rcsum = tvb(off + 6, 2):uint()
        local span = rlen
        if rlen < RECORD_HEADER_LEN then
            span = RECORD_HEADER_LEN
        elseif rlen > rest then
            span = rest
        end
        local item = root:add(cf.record, tvb(off, math.min(span, len - off)))
        item:add(cf.rec_index, index):set_generated()
        item:add(cf.rec_offset, off):set_generated()
        item:add(cf.rec_srcport, tvb(off, 2))
        item:add(cf.rec_dstport, tvb(off + 2, 2))
        local litem = item:add(cf.rec_length, tvb(off + 4, 2))
        local citem = item:add(cf.rec_checksum, tvb(off + 6, 2))
        if rlen < RECORD_HEADER_LEN then
            item:set_text(string.format("Record %d (bad length %d)", index, rlen))
            structural = structural or "bad_length"
            litem:add_proto_expert_info(ce.bad_length, string.format(
                "Malformed caravan (bad_length): record at byte %d: length %d is below 8", off, rlen))
            off = off + RECORD_HEADER_LEN
            break
        end
        if rlen > rest then
            item:set_text(string.format("Record %d (length %d overruns)", index, rlen))
            structural = structural or "overrun"
            litem:add_proto_expert_info(ce.overrun, string.format(
                "Malformed caravan (overrun): record at byte %d: length %d runs past the %d bytes left",
                off, rlen, rest))
            off = len
            break
        end
        local plen = rlen - RECORD_HEADER_LEN
        item:set_text(string.format("Record %d: %d -> %d, %d bytes of payload", index, rs, rd, plen))
        if rs ~= sport or rd ~= dport then
            structural = structural or "port_mismatch"
            item:add_proto_expert_info(ce.port_mismatch, string.format(
                "Malformed caravan (port_mismatch): record at byte %d: ports %d->%d differ from the caravan's",
                off, rs, rd))
        end
        -- Inner checksum: the original datagram's, over the outer addresses.
        if ip then
            local rstatus = 0
            if rcsum == 0 then
                rstatus = 3
                if ip.version == 6 then
                    citem:add_proto_expert_info(ce.rec_zero_v6)
                end
            elseif caravan.prefs.check_inner then
                local header_sum = rs + rd + rlen
                local want = udp_checksum(pseudo_sum(ip, rlen), header_sum, tvb:raw(off + 8, plen))
                citem:add(cf.rec_checksum_calculated, want):set_generated()
                if want == rcsum then
                    rstatus = 1
                else
                    rstatus = 2
                    citem:add_proto_expert_info(ce.rec_bad_checksum, string.format(
                        "Inner UDP checksum 0x%04x does not verify, expected 0x%04x", rcsum, want))
                end
            end
            citem:add(cf.rec_checksum_status, rstatus):set_generated()
        end
        item:add(cf.rec_payload_len, tvb(off + 4, 2), plen):set_generated()
        local ptvb = tvb(off + RECORD_HEADER_LEN, plen):tvb()
        if plen > 0 then
            item:add(cf.rec_payload, tvb(off + RECORD_HEADER_LEN, plen))
        else
            item:add(cf.rec_payload, tvb(off + RECORD_HEADER_LEN, 0), ""):append_text("(empty)")
        end
        dissect_record_payload(ptvb, pinfo, item, rs, rd)
        off = off + rlen
        if structural == nil then
            count = count + 1
        end
    end
    if off < len then
        root:add(cf.trailing, tvb(off, len - off))
    end
    if structural == nil and count == 0 and not incomplete then
        structural = "empty"
        root:add_proto_expert_info(ce.empty, "Malformed caravan (empty): caravan has no records")
    end
    if structural ~= nil then
        table.insert(reasons, structural)
    end
    if structural == nil and count == 1 and not incomplete then
        root:add_proto_expert_info(ce.single)
    end

    root:add(cf.records, count):set_generated()
    for _, r in ipairs(reasons) do
        root:add(cf.malformed, r):set_generated()
    end
    local info = string.format("PX-caravan %d \226\134\146 %d, %d record%s", sport, dport, count,
        count == 1 and "" or "s")
    if #reasons > 0 then
        info = info .. " [malformed: " .. table.concat(reasons, ", ") .. "]"
        root:append_text(" [malformed: " .. table.concat(reasons, ", ") .. "]")
    else
        root:append_text(string.format(", %d record%s", count, count == 1 and "" or "s"))
    end
    pinfo.cols.info = info
    return len
end

-- Called from the udp.port table (Decode As): always a caravan.
function caravan.dissector(tvb, pinfo, tree)
    return dissect_caravan(tvb, pinfo, tree, outer_udp(pinfo), enclosing_ip())
end
udp_port_table:add_for_decode_as(caravan)

local function caravan_heuristic(tvb, pinfo, tree)
    if not caravan.prefs.heuristic then
        return false
    end
    local ip = enclosing_ip()
    if ip == nil or ip.dscp ~= caravan.prefs.dscp or ip.fragment or inside_icmp_error() then
        return false
    end
    local udp = outer_udp(pinfo)
    if not caravan.prefs.claim_malformed and caravan_refusal(tvb, udp, ip) ~= nil then
        return false
    end
    dissect_caravan(tvb, pinfo, tree, udp, ip)
    return true
end
caravan:register_heuristic("udp", caravan_heuristic)

-- Two codepoint-marked datagrams never reach the heuristic: an empty one
-- (the UDP dissector hands an empty payload to no one; the gateway refuses
-- it as "empty"), and one whose port has a registered dissector that
-- accepted it (UDP tries ports before heuristics unless
-- udp.try_heuristic_first is set; e.g. DNS on port 53). A postdissector
-- adds the caravan to those (the port's dissection stays in the tree).
local f_udp_length = Field.new("udp.length")
local f_udp_payload = Field.new("udp.payload")
local f_udp_srcport = Field.new("udp.srcport")
local f_udp_dstport = Field.new("udp.dstport")
local caravan_post = Proto("pxcaravan_post", "PacketExpress PX-caravan (postdissector)")
function caravan_post.dissector(tvb, pinfo, tree)
    local claimed = claimed_frame == pinfo.number
    claimed_frame = nil
    if claimed or not caravan.prefs.heuristic then
        return
    end
    local ulen, sp, dp, ck = last(f_udp_length), last(f_udp_srcport), last(f_udp_dstport), last(f_udp_checksum)
    if ulen == nil or sp == nil or dp == nil then
        return
    end
    local ip = enclosing_ip()
    if ip == nil or ip.dscp ~= caravan.prefs.dscp or ip.fragment or inside_icmp_error() then
        return
    end
    local payload = nil
    if ulen.value > 8 then
        local fi = last(f_udp_payload)
        if fi == nil or fi.offset < ulen.offset then
            return
        end
        payload = fi.range:tvb()
    end
    local udp = { sport = sp.value, dport = dp.value, checksum = ck and ck.value, payload_len = ulen.value - 8 }
    if not caravan.prefs.claim_malformed and caravan_refusal(payload, udp, ip) ~= nil then
        return
    end
    dissect_caravan(payload, pinfo, tree, udp, ip)
end
register_postdissector(caravan_post)

---------------------------------------------------------------------------
-- F-PMTUD
---------------------------------------------------------------------------

local fpmtud = Proto("fpmtud", "F-PMTUD (ICMP-free path MTU discovery)")

-- crates/px-pmtud/src/fpmtud/wire.rs
local MAGIC = "FPMT"
local EXT_MARKER = "PX"
local EXT_VERSION = 1
local DEFAULT_PORT = 9999
local HEADER_LEN = 20
local PROBE_MIN_LEN = 24
local REPORT_FIXED_LEN = 32
local FRAGMENT_RECORD_LEN = 6
local LEGACY_REPLY_LEN = 4

local msg_types = { [1] = "probe", [2] = "confirm", [3] = "report" }

local ff = {
    kind = ProtoField.string("fpmtud.kind", "Message",
        "legacy_probe, legacy_reply, probe, confirm, report, or unknown (a refused message)"),
    magic = ProtoField.string("fpmtud.magic", "Magic", "\"FPMT\": first 4 bytes of every probe"),
    marker = ProtoField.string("fpmtud.marker", "Extension marker",
        "\"PX\": marks PacketExpress's extended format"),
    version = ProtoField.uint8("fpmtud.version", "Version", base.DEC, nil, nil, "Extended format version (1)"),
    type = ProtoField.uint8("fpmtud.type", "Type", base.DEC, msg_types, nil,
        "1 probe (round 1, DF clear), 2 confirmation probe (round 2, DF set), 3 report"),
    nonce = ProtoField.uint64("fpmtud.nonce", "Nonce", base.HEX, nil, nil,
        "Random per measurement, chosen by the prober; a report must echo it"),
    probe_id = ProtoField.uint32("fpmtud.probe_id", "Probe id", base.DEC, nil, nil,
        "Distinguishes the probes of one measurement; the report echoes it"),
    ip_len = ProtoField.uint16("fpmtud.probe.ip_len", "IP length sent", base.DEC, nil, nil,
        "IPv4 total length the prober gave this probe"),
    probe_reserved = ProtoField.uint16("fpmtud.probe.reserved", "Reserved", base.HEX, nil, nil,
        "Reserved, sent as 0"),
    padding = ProtoField.bytes("fpmtud.padding", "Padding", base.NONE,
        "Padding up to the probe size (zeros from PacketExpress; anything from the reference tool)"),
    padding_len = ProtoField.uint32("fpmtud.padding_len", "Padding length", base.DEC, nil, nil,
        "Bytes of padding after the probe's header"),
    flags = ProtoField.uint8("fpmtud.report.flags", "Flags", base.HEX, nil, nil, "Report flags"),
    flag_reassembled = ProtoField.bool("fpmtud.report.flags.reassembled", "Reassembled", 8, nil, 0x01,
        "The whole datagram arrived (unfragmented, or reassembled)"),
    flag_fragmented = ProtoField.bool("fpmtud.report.flags.fragmented", "Fragmented", 8, nil, 0x02,
        "The probe arrived in more than one IP fragment"),
    flag_truncated = ProtoField.bool("fpmtud.report.flags.truncated", "Truncated", 8, nil, 0x04,
        "The fragment list was cut to respect the reply budget (no amplification)"),
    flag_confirm = ProtoField.bool("fpmtud.report.flags.confirm", "Confirm", 8, nil, 0x08,
        "This report answers a DF-set confirmation probe"),
    flag_unknown = ProtoField.uint8("fpmtud.report.flags.unknown", "Unknown flags", base.HEX, nil, 0xf0,
        "Bits not defined by version 1 (ignored by receivers, sent as 0)"),
    report_reserved = ProtoField.uint8("fpmtud.report.reserved", "Reserved", base.HEX, nil, nil,
        "Reserved, sent as 0"),
    link_mtu = ProtoField.uint16("fpmtud.report.link_mtu", "Responder link MTU", base.DEC, nil, nil,
        "MTU of the link the probe arrived on (0 = unknown); the path MTU cannot exceed it"),
    probe_ip_len = ProtoField.uint16("fpmtud.report.probe_ip_len", "Echoed IP length sent", base.DEC, nil, nil,
        "The probe's 'IP length sent', echoed"),
    largest = ProtoField.uint16("fpmtud.report.largest_ip_len", "Largest IP length received", base.DEC, nil, nil,
        "Largest IP packet length received for the probe (whole packet if unfragmented); "
            .. "what the legacy reply would say"),
    frag_count = ProtoField.uint16("fpmtud.report.fragment_count", "Fragment records", base.DEC, nil, nil,
        "Number n of 6-byte fragment records that follow"),
    report_reserved2 = ProtoField.uint16("fpmtud.report.reserved2", "Reserved", base.HEX, nil, nil,
        "Reserved, sent as 0"),
    fragment = ProtoField.none("fpmtud.fragment", "Fragment record",
        "One IP fragment (or whole packet) as the responder saw it, in arrival order"),
    frag_offset = ProtoField.uint16("fpmtud.fragment.offset", "Byte offset", base.DEC, nil, nil,
        "Byte offset of the fragment's data in the datagram (8 x IP fragment offset)"),
    frag_ip_len = ProtoField.uint16("fpmtud.fragment.ip_len", "IP total length", base.DEC, nil, nil,
        "IP total length of the fragment"),
    frag_flags = ProtoField.uint8("fpmtud.fragment.flags", "Record flags", base.HEX, nil, nil,
        "Fragment record flags"),
    frag_mf = ProtoField.bool("fpmtud.fragment.mf", "More fragments", 8, nil, 0x01,
        "The fragment's IP 'more fragments' flag"),
    frag_reserved = ProtoField.uint8("fpmtud.fragment.reserved", "Reserved", base.HEX, nil, nil,
        "Reserved, sent as 0"),
    trailing = ProtoField.bytes("fpmtud.trailing", "Trailing bytes", base.NONE,
        "Bytes after the last fragment record: ignored by receivers (room for later fields)"),
    legacy_largest = ProtoField.uint32("fpmtud.legacy.largest_ip_len", "Largest IP length received", base.DEC,
        nil, nil,
        "The reference tool's 4-byte reply: largest IP packet length received for the probe "
            .. "(the whole packet's IP length if it arrived unfragmented)"),
    malformed = ProtoField.string("fpmtud.malformed", "Malformed",
        "Why the Rust parser refuses the message: too_short, not_fpmt, unsupported_version, unexpected_type "
            .. "(px_pmtud::fpmtud::wire::ParseError)"),
    needed = ProtoField.uint32("fpmtud.needed", "Bytes needed", base.DEC, nil, nil,
        "too_short: bytes the parser needed"),
}
fpmtud.fields = ff

local function fpmtud_expert(reason, what)
    return ProtoExpert.new("fpmtud.malformed." .. reason, "Malformed F-PMTUD message (" .. reason .. "): " .. what,
        expert.group.MALFORMED, expert.severity.ERROR)
end

local fe = {
    too_short = fpmtud_expert("too_short", "the message ends before its kind or body"),
    not_fpmt = fpmtud_expert("not_fpmt", "not an F-PMTUD message"),
    unsupported_version = fpmtud_expert("unsupported_version", "an extended reply of a version we do not speak"),
    unexpected_type = fpmtud_expert("unexpected_type", "a type byte unknown or not valid in this direction"),
    legacy_fallback = ProtoExpert.new("fpmtud.unknown_version_probe",
        "Extended probe of a version we do not speak: a responder answers it the legacy way",
        expert.group.PROTOCOL, expert.severity.NOTE),
}
fpmtud.experts = { fe.too_short, fe.not_fpmt, fe.unsupported_version, fe.unexpected_type, fe.legacy_fallback }

fpmtud.prefs.port = Pref.uint("UDP port", DEFAULT_PORT,
    "Responder's UDP port (wire.rs DEFAULT_PORT = 9999, the reference tool's). Everything on it is dissected "
        .. "as F-PMTUD; a 4-byte payload from it is a legacy reply.")
fpmtud.prefs.heuristic = Pref.bool("Detect F-PMTUD on any port (heuristic on \"FPMT\")", true,
    "Claim UDP payloads that begin with FPMT on any port (legacy replies carry no magic: "
        .. "they are recognised on the port only)")

local function refuse(root, pinfo, reason, text, needed)
    root:add(ff.malformed, reason):set_generated()
    if needed then
        root:add(ff.needed, needed):set_generated()
    end
    root:add_proto_expert_info(fe[reason], "Malformed F-PMTUD message (" .. reason .. "): " .. text)
    pinfo.cols.info:append(" [malformed: " .. reason .. "]")
end

local function too_short(root, pinfo, needed, got)
    refuse(root, pinfo, "too_short", string.format("message too short: need %d bytes, got %d", needed, got),
        needed)
end

-- Fields of the common header that are present (up to 20 bytes).
local function add_header(tvb, root)
    local len = tvb:reported_len()
    root:add(ff.magic, tvb(0, 4))
    if len >= 6 then
        root:add(ff.marker, tvb(4, 2))
    end
    if len >= 7 then
        root:add(ff.version, tvb(6, 1))
    end
    if len >= 8 then
        root:add(ff.type, tvb(7, 1))
    end
    if len >= 16 then
        root:add(ff.nonce, tvb(8, 8))
    end
    if len >= HEADER_LEN then
        root:add(ff.probe_id, tvb(16, 4))
    end
end

local function add_padding(tvb, root, from)
    local n = tvb:reported_len() - from
    if n > 0 then
        root:add(ff.padding, tvb(from, math.min(n, tvb:len() - from)))
    end
    root:add(ff.padding_len, n):set_generated()
end

-- parse_request for an extended v1 probe or confirmation (type 1 or 2).
local function dissect_probe(tvb, pinfo, root, ty)
    local len = tvb:reported_len()
    local name = msg_types[ty]
    root:add(ff.kind, name):set_generated()
    pinfo.cols.info = (ty == 1) and "F-PMTUD probe" or "F-PMTUD confirmation probe"
    if len < PROBE_MIN_LEN then
        too_short(root, pinfo, PROBE_MIN_LEN, len)
        return
    end
    root:add(ff.ip_len, tvb(20, 2))
    root:add(ff.probe_reserved, tvb(22, 2))
    add_padding(tvb, root, PROBE_MIN_LEN)
    pinfo.cols.info:append(string.format(" id=%d nonce=0x%s ip_len=%d", tvb(16, 4):uint(),
        tostring(tvb(8, 8):uint64():tohex()), tvb(20, 2):uint()))
end

-- parse_reply for an extended v1 report (type 3).
local function dissect_report(tvb, pinfo, root)
    local len = tvb:reported_len()
    root:add(ff.kind, "report"):set_generated()
    pinfo.cols.info = "F-PMTUD report"
    if len < HEADER_LEN then
        too_short(root, pinfo, HEADER_LEN, len)
        return
    end
    if len < REPORT_FIXED_LEN then
        too_short(root, pinfo, REPORT_FIXED_LEN, len)
        return
    end
    local fl = root:add(ff.flags, tvb(20, 1))
    fl:add(ff.flag_reassembled, tvb(20, 1))
    fl:add(ff.flag_fragmented, tvb(20, 1))
    fl:add(ff.flag_truncated, tvb(20, 1))
    fl:add(ff.flag_confirm, tvb(20, 1))
    fl:add(ff.flag_unknown, tvb(20, 1))
    local flags = tvb(20, 1):uint()
    local names = {}
    for _, f in ipairs({ { 1, "REASSEMBLED" }, { 2, "FRAGMENTED" }, { 4, "TRUNCATED" }, { 8, "CONFIRM" } }) do
        if math.floor(flags / f[1]) % 2 == 1 then
            table.insert(names, f[2])
        end
    end
    if #names > 0 then
        fl:append_text(" (" .. table.concat(names, ", ") .. ")")
    end
    root:add(ff.report_reserved, tvb(21, 1))
    root:add(ff.link_mtu, tvb(22, 2))
    root:add(ff.probe_ip_len, tvb(24, 2))
    root:add(ff.largest, tvb(26, 2))
    root:add(ff.frag_count, tvb(28, 2))
    root:add(ff.report_reserved2, tvb(30, 2))
    local n = tvb(28, 2):uint()
    pinfo.cols.info:append(string.format(" id=%d nonce=0x%s largest=%d", tvb(16, 4):uint(),
        tostring(tvb(8, 8):uint64():tohex()), tvb(26, 2):uint()))
    if #names > 0 then
        pinfo.cols.info:append(" " .. table.concat(names, ","))
    end
    local fit = math.min(n, math.floor((tvb:len() - REPORT_FIXED_LEN) / FRAGMENT_RECORD_LEN))
    for i = 0, fit - 1 do
        local o = REPORT_FIXED_LEN + i * FRAGMENT_RECORD_LEN
        local r = root:add(ff.fragment, tvb(o, FRAGMENT_RECORD_LEN))
        local mf = tvb(o + 4, 1):uint() % 2 == 1
        r:set_text(string.format("Fragment %d: offset %d, IP length %d%s", i + 1, tvb(o, 2):uint(),
            tvb(o + 2, 2):uint(), mf and ", MF" or ""))
        r:add(ff.frag_offset, tvb(o, 2))
        r:add(ff.frag_ip_len, tvb(o + 2, 2))
        local rf = r:add(ff.frag_flags, tvb(o + 4, 1))
        rf:add(ff.frag_mf, tvb(o + 4, 1))
        r:add(ff.frag_reserved, tvb(o + 5, 1))
    end
    local finish = REPORT_FIXED_LEN + n * FRAGMENT_RECORD_LEN
    if len < finish then
        too_short(root, pinfo, finish, len)
        return
    end
    if tvb:len() > finish then
        root:add(ff.trailing, tvb(finish, tvb:len() - finish))
    end
end

local function dissect_fpmtud(tvb, pinfo, tree)
    -- Lengths are the datagram's; bytes beyond a capture's snap length are
    -- only not shown (the fixed parts are read from the first 32 bytes).
    local len = tvb:reported_len()
    local port = fpmtud.prefs.port
    local from_responder = pinfo.src_port == port and pinfo.dst_port ~= port
    local to_responder = pinfo.dst_port == port and pinfo.src_port ~= port
    pinfo.cols.protocol = "F-PMTUD"
    local root = tree:add(fpmtud, tvb())
    if tvb:len() < math.min(len, REPORT_FIXED_LEN) then
        root:append_text(string.format(" [capture cut at %d of %d bytes]", tvb:len(), len))
        pinfo.cols.info = "F-PMTUD (capture cut)"
        return tvb:len()
    end
    local is_fpmt = len >= 4 and tvb:raw(0, 4) == MAGIC

    -- A prober receiving exactly 4 bytes takes them as a legacy reply
    -- (parse_reply checks that first); 4 bytes sent to the responder are a
    -- request (a minimal legacy probe if "FPMT", else not_fpmt).
    if len == LEGACY_REPLY_LEN and (from_responder or (not is_fpmt and not to_responder)) then
        root:add(ff.kind, "legacy_reply"):set_generated()
        root:add(ff.legacy_largest, tvb(0, 4))
        root:append_text(", legacy reply")
        pinfo.cols.info = string.format("F-PMTUD legacy reply: largest IP length %d", tvb(0, 4):uint())
        return len
    end

    if not is_fpmt then
        root:add(ff.kind, "unknown"):set_generated()
        pinfo.cols.info = "F-PMTUD"
        if from_responder then
            -- parse_reply: not 4 bytes, so a report: needs 20 bytes and FPMT.
            if len < HEADER_LEN then
                too_short(root, pinfo, HEADER_LEN, len)
            else
                refuse(root, pinfo, "not_fpmt", "not an F-PMTUD message")
            end
        else
            -- parse_request: needs FPMT.
            if len < 4 then
                too_short(root, pinfo, 4, len)
            else
                refuse(root, pinfo, "not_fpmt", "not an F-PMTUD message")
            end
        end
        return len
    end

    local has_marker = len >= 6 and tvb:raw(4, 2) == EXT_MARKER
    local version = (len >= 7) and tvb(6, 1):uint() or nil

    if has_marker and version == EXT_VERSION then
        add_header(tvb, root)
        -- wire.rs parse_request reads a missing type byte as 0.
        local ty = (len >= 8) and tvb(7, 1):uint() or 0
        if ty == 1 or ty == 2 then
            root:append_text(", " .. msg_types[ty])
            dissect_probe(tvb, pinfo, root, ty)
        elseif ty == 3 then
            root:append_text(", report")
            dissect_report(tvb, pinfo, root)
        else
            root:add(ff.kind, "unknown"):set_generated()
            pinfo.cols.info = "F-PMTUD extended message"
            refuse(root, pinfo, "unexpected_type", string.format("unexpected F-PMTUD message type %d", ty))
        end
        return len
    end

    if has_marker and version ~= nil and from_responder then
        -- parse_reply: an extended reply of another version.
        root:add(ff.magic, tvb(0, 4))
        root:add(ff.marker, tvb(4, 2))
        root:add(ff.version, tvb(6, 1))
        root:add(ff.kind, "unknown"):set_generated()
        pinfo.cols.info = "F-PMTUD extended reply"
        if len < HEADER_LEN then
            too_short(root, pinfo, HEADER_LEN, len)
        else
            refuse(root, pinfo, "unsupported_version", string.format("unsupported F-PMTUD version %d", version))
        end
        return len
    end

    -- parse_request: FPMT followed by anything else is a legacy probe,
    -- including PX with a version we do not speak.
    root:add(ff.kind, "legacy_probe"):set_generated()
    root:add(ff.magic, tvb(0, 4))
    root:append_text(", legacy probe")
    pinfo.cols.info = string.format("F-PMTUD legacy probe (%d bytes)", len)
    if has_marker and version ~= nil then
        root:add(ff.marker, tvb(4, 2))
        root:add(ff.version, tvb(6, 1))
        root:add_proto_expert_info(fe.legacy_fallback, string.format(
            "Extended probe of version %d (not spoken by wire.rs): a responder answers it the legacy way", version))
        pinfo.cols.info:append(string.format(" [extended version %d]", version))
    end
    add_padding(tvb, root, 4)
    return len
end

function fpmtud.dissector(tvb, pinfo, tree)
    return dissect_fpmtud(tvb, pinfo, tree)
end

local registered_port = nil
local function register_port()
    if registered_port ~= nil then
        udp_port_table:remove(registered_port, fpmtud)
    end
    registered_port = fpmtud.prefs.port
    if registered_port ~= 0 then
        udp_port_table:add(registered_port, fpmtud)
    end
end
register_port()

function fpmtud.prefs_changed()
    if registered_port ~= fpmtud.prefs.port then
        register_port()
    end
end

local function fpmtud_heuristic(tvb, pinfo, tree)
    if not fpmtud.prefs.heuristic or tvb:len() < 4 or tvb:raw(0, 4) ~= MAGIC then
        return false
    end
    dissect_fpmtud(tvb, pinfo, tree)
    return true
end
fpmtud:register_heuristic("udp", fpmtud_heuristic)
