#!/usr/bin/python3
"""Runs tshark with the PacketExpress dissector on pcaps and compares the
fields it extracts with what the sender put in.

Usage: check.py LUA EXPECTATIONS.json [PCAP_DIR]

EXPECTATIONS.json (written by make_pcaps.py, or by a lab test next to its
pcap) holds runs: {"name", "pcap" (relative to the JSON's directory),
"tshark_args", "fields", "types", "frames": {"N": {field: [values]}},
"frame_filter" (optional: only the listed frames are printed), "editcap"
(optional: arguments for editcap, which rewrites the pcap before the run)}. Types:
"int" (tshark's decimal or 0x-hex), "bool", "str", "bytes" (hex), and
"count" for expert infos (the frame gives a number: how many times the
expert info is raised; absent = 0). A frame with "allow_exception": true
may carry another dissector's exception (never a Lua error).
Every listed field of every listed frame is compared, all occurrences in
order; a field a frame does not list must be absent from it. Without
frame_filter, every frame tshark prints must be listed.

With PCAP_DIR, every *.pcap / *.pcapng there is also dissected: with
X.json next to X.pcap, as above; without, it must dissect without a Lua
error or a malformed-packet exception (the pxcaravan/fpmtud verdicts are
printed for the record, not judged).

Exit 0 when everything matched.
"""

import glob
import json
import os
import subprocess
import sys

AGG = "\x1f"  # unit separator: never inside a value we compare


def tshark(lua, pcap, args, fields):
    cmd = ["tshark", "-n", "-X", "lua_script:" + lua, "-r", pcap] + list(args) + [
        "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=" + AGG,
        "-e", "frame.number"]
    for f in fields:
        cmd += ["-e", f]
    p = subprocess.run(cmd, capture_output=True, text=True)
    err = "\n".join(line for line in p.stderr.splitlines() if "This could be dangerous" not in line)
    if p.returncode != 0 or "Lua" in err or "error" in err.lower():
        raise RuntimeError(f"tshark failed ({p.returncode}): {' '.join(cmd)}\n{err}")
    rows = {}
    for line in p.stdout.splitlines():
        cols = line.split("\t")
        cols += [""] * (len(fields) + 1 - len(cols))
        rows[cols[0]] = {f: ([] if c == "" else c.split(AGG)) for f, c in zip(fields, cols[1:])}
    return rows


def is_dissector_error(message):
    """A Lua error or an exception, not one of the dissector's own verdicts
    (those are in the Malformed expert group too, so _ws.malformed is set
    for them and cannot tell the two apart)."""
    return any(s in message for s in ("Lua Error", "Dissector bug", "Exception occurred"))


def norm(value, ty):
    if ty == "int":
        if isinstance(value, str):
            # tshark prints uint64 BASE_HEX as 0x..., others in decimal.
            return int(value, 0) if value.lower().startswith("0x") else int(value)
        return int(value)
    if ty == "bool":
        if isinstance(value, bool):
            return value
        return value.strip().lower() in ("1", "true", "set")
    if ty == "bytes":
        # tshark prints a zero-length byte string as "<MISSING>".
        value = value.replace(":", "").lower()
        return "" if value == "<missing>" else value
    return value


def short(values):
    text = repr(values)
    return text if len(text) <= 300 else text[:300] + "...]"


def compare_run(lua, base, run):
    fields, types = run["fields"], run.get("types", {})
    pcap = os.path.join(base, run["pcap"])
    if run.get("editcap"):
        # The run reads the pcap as editcap rewrites it (e.g. -s: snap length).
        out = os.path.join(base, "editcap-" + "".join(c for c in "_".join(run["editcap"]) if c.isalnum() or c == "_")
                           + "-" + run["pcap"])
        subprocess.run(["editcap"] + run["editcap"] + [pcap, out], check=True, capture_output=True)
        pcap = out
    rows = tshark(lua, pcap, run.get("tshark_args", []), fields + ["_ws.expert.message"])
    failures = []
    frames = run["frames"]
    for n, r in rows.items():
        errors = [m for m in r["_ws.expert.message"] if is_dissector_error(m)]
        if frames.get(n, {}).get("allow_exception"):
            # Another protocol's dissector fails on the frame (e.g. DNS
            # claiming a caravan by its port): only Lua errors count.
            errors = [m for m in errors if "Lua Error" in m]
        if errors:
            failures.append(f"frame {n}: dissector error: {errors}")
    for n, exp in frames.items():
        got = rows.get(n)
        if got is None:
            failures.append(f"frame {n} ({exp.get('note', '')}): not printed by tshark")
            continue
        for f in fields:
            want = exp.get(f, [])
            ty = types.get(f, "str")
            if ty == "count":  # an expert info: how many times it was raised
                have_n, want_n = len(got[f]), int(exp.get(f, 0))
                if have_n != want_n:
                    failures.append(f"frame {n} ({exp.get('note', '')}): expert {f}: expected {want_n}, "
                                    f"raised {have_n}")
                continue
            try:
                have = [norm(v, ty) for v in got[f]]
            except ValueError:
                have = got[f]
            want_n = [norm(v, ty) for v in want]
            if have != want_n:
                failures.append(f"frame {n} ({exp.get('note', '')}): {f}: expected {short(want_n)}, "
                                f"tshark gave {short(have)}")
    if not run.get("frame_filter"):
        for n in rows:
            if n not in frames:
                failures.append(f"frame {n}: printed by tshark but not in the expectations")
    return len(frames), failures


def check_unannotated(lua, pcap):
    """A pcap without expectations: no Lua error, no dissector exception."""
    fields = ["_ws.expert.message", "pxcaravan.records", "pxcaravan.malformed", "fpmtud.kind", "fpmtud.malformed"]
    rows = tshark(lua, pcap, [], fields)
    failures, caravans, fpmt = [], 0, 0
    for n, r in rows.items():
        msgs = r["_ws.expert.message"]
        if any(is_dissector_error(m) for m in msgs):
            failures.append(f"frame {n}: dissector error: {msgs}")
        caravans += bool(r["pxcaravan.records"])
        fpmt += bool(r["fpmtud.kind"])
        bad = r["pxcaravan.malformed"] + r["fpmtud.malformed"]
        if bad:
            print(f"    note: frame {n}: malformed {bad}")
    print(f"    {len(rows)} frames, {caravans} caravans, {fpmt} F-PMTUD messages")
    return failures


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    lua, expectations = sys.argv[1], sys.argv[2]
    jsons = [expectations]
    extra = []
    if len(sys.argv) > 3:
        d = sys.argv[3]
        for pcap in sorted(glob.glob(os.path.join(d, "*.pcap")) + glob.glob(os.path.join(d, "*.pcapng"))):
            j = os.path.splitext(pcap)[0] + ".json"
            if os.path.exists(j):
                jsons.append(j)
            else:
                extra.append(pcap)
        jsons += [j for j in sorted(glob.glob(os.path.join(d, "*.json")))
                  if j not in jsons and os.path.basename(j) == "expectations.json"]
    total_frames, failures = 0, []
    for j in jsons:
        with open(j) as f:
            spec = json.load(f)
        base = os.path.dirname(os.path.abspath(j))
        for run in spec["runs"]:
            n, fails = compare_run(lua, base, run)
            total_frames += n
            status = "ok" if not fails else f"FAILED ({len(fails)})"
            how = " ".join((["editcap " + " ".join(run["editcap"]) + " |"] if run.get("editcap") else [])
                           + [run["pcap"]] + run.get("tshark_args", []))
            print(f"  {run['name']} [{how}]: {n} frames {status}")
            failures += [f"{run['name']}: {x}" for x in fails]
    for pcap in extra:
        print(f"  {pcap} (no expectations: errors only)")
        failures += [f"{pcap}: {x}" for x in check_unannotated(lua, pcap)]
    for x in failures:
        print("FAIL " + x)
    print(f"{'FAIL' if failures else 'PASS'}: {total_frames} frames compared, {len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
