#!/usr/bin/python3
"""Issue 13's figures in one run: `make bench` (BENCH_ARGS for fewer runs) writes
bench/out/report.json (every figure and its raw samples), bench/out/report.md (one
markdown table) and bench/out/report.png (a matplotlib plot). A benchmark, not a
test: it asserts nothing; a figure that cannot be measured says why.

    python3 bench/report.py --cela build/cela [--sessions 5000] [--runs 100] [--quick]

Figures (each names its command, its number of runs, its target and the ratio):
  a  `cela run --template host -- /bin/true` p50 against bwrap with the same
     namespaces (the floor reference), and fork+exec
  b  the same with 500 live sessions of a private daemon, ratio to (a)
  c  exec round trip of /bin/true over keep-alive REST (POST .../run) p50
  d  first output byte over SSE p50
  e  cold session create p50 (base template, the daemon's default disk layer)
  f  creates per second at 8 concurrent clients
  g  --sessions live idle sessions: memory per session, daemon RSS, create and exec
     p50 at N against 0 live, time to delete all, leftovers, daemon fds per session
  h  the seccomp program cache with two builds on one host
runc and Docker rows come from bench/peers.py when they work here.
"""
import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import time

import harness  # noqa: E402  (a script's own directory is on sys.path)
import daemon as dbench
import peers as pbench
import scale as sbench
from client import KeepAlive
from seccomp_cache import seccomp_cache
from spawn import measure, spawn_tools
from stats import pct

MiB = 2 ** 20
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def figure(fid, what, command, runs, value, unit, target, better="lower", reference=None, ratio=None,
           ratio_of=None, note=None):
    """One row of the report. target: the number `value` is held against (ratio
    targets hold `ratio`); better: "lower" or "higher"."""
    judged = ratio if ratio_of else value
    met = None
    if judged is not None and target is not None:
        met = judged <= target if better == "lower" else judged >= target
    return {"id": fid, "what": what, "command": command, "runs": runs, "value": value, "unit": unit,
            "reference": reference, "ratio": ratio, "ratio_of": ratio_of, "target": target, "better": better,
            "met": met, "note": note}


def skipped(fid, what, command, why):
    return {"id": fid, "what": what, "command": command, "runs": 0, "value": None, "unit": None, "reference": None,
            "ratio": None, "ratio_of": None, "target": None, "better": None, "met": None,
            "note": f"skipped: {why}"}


def spawn_figures(cela, runs, raw):
    t = measure(spawn_tools(cela), runs)
    raw["spawn_0"] = t
    c, b, f = (pct(t[k], .5) for k in ("cela", "bwrap", "fork+exec"))
    return [
        figure("a", "one-shot run p50", "cela run --template host -- /bin/true", runs, c, "ms", 1.0,
               reference=f"bwrap {b:.2f} ms (--unshare-all, ro /usr, proc, dev, tmpfs)", ratio=c / b,
               ratio_of="cela / bwrap"),
        figure("a", "floor: fork+exec p50", "/bin/true", runs, f, "ms", None, reference=f"bwrap {b:.2f} ms",
               ratio=b / f, ratio_of="bwrap / fork+exec"),
    ], c, b


def spawn_at_load(cela, runs, cela_0, bwrap_0, raw):
    """Figure (b): a hook of the scale run, called with the live session count."""
    def hook(live):
        t = measure(spawn_tools(cela), runs, warmup=3)
        raw["spawn_loaded"] = {"live": live, **t}
        c, b = pct(t["cela"], .5), pct(t["bwrap"], .5)
        return {"live": live, "cela_p50_ms": c, "bwrap_p50_ms": b, "ratio_to_a": c / cela_0,
                "bwrap_ratio_to_a": b / bwrap_0}
    return hook


def daemon_figures(d, template, runs, throughput_n, clients, raw):
    c = KeepAlive(d.socket)
    body = dbench.session_body(template)
    figs = []
    try:
        sid = dbench.create(c, dbench.session_body(template))
        rt = dbench.exec_roundtrip(c, sid, runs)
        connects = c.connects
        first, closed = dbench.first_output_byte(c, sid, runs)
        c.call("DELETE", f"/v1/sessions/{sid}")
        cold = dbench.cold_create(c, body, max(10, runs // 2))
        raw.update({"exec_roundtrip": rt, "first_output_byte": first, "create": cold})
        figs.append(figure("c", "exec round trip p50", f"POST /v1/sessions/{{id}}/run {{\"argv\":[\"/bin/true\"]}} "
                           f"({template} session)", len(rt), pct(rt, .5), "ms", 1.5,
                           reference=f"p95 {pct(rt, .95):.2f} ms",
                           note=f"one keep-alive unix-socket connection for all runs ({connects} opened)"))
        figs.append(figure("d", "first output byte over SSE p50", "POST .../execs {\"argv\":[\"echo\",\"x\"]} then "
                           "GET .../output?follow=1 to the first stdout event", len(first), pct(first, .5), "ms", 1.5,
                           reference=f"p95 {pct(first, .95):.2f} ms",
                           note="the daemon closes the stream's connection (Connection: close): it is opened "
                           "before the clock starts" if closed else None))
        startup = pct(cold["startup_ms"], .5)
        figs.append(figure("e", "cold session create p50", f"POST /v1/sessions {{\"template\":\"{template}\"}} "
                           "(no warm pool; default disk layer: kind disk, disk.pool 2), then DELETE",
                           len(cold["samples_ms"]), pct(cold["samples_ms"], .5), "ms", 5.0,
                           reference=f"daemon startup_ms p50 {startup:.1f}"))
        ids, seconds, error = dbench.create_many(d.socket, throughput_n, body, clients)
        raw["throughput"] = {"created": len(ids), "seconds": seconds, "error": error}
        figs.append(figure("f", f"creates per second, {clients} clients", f"{throughput_n} x POST /v1/sessions "
                           f"({template}) on {clients} keep-alive connections", len(ids), len(ids) / seconds, "/s",
                           300, better="higher", note=f"stopped: {error}" if error else None))
        dbench.delete_many(d.socket, ids, clients)
    finally:
        c.close()
    return figs


def scale_figures(s, n):
    """Figure (g) rows from scale.summarize()."""
    runs = s.get("runs")
    live = s.get("reached")
    died = s.get("crashed") or s.get("error")
    stop = "the daemon died (below)" if died else s.get("stopped_by")
    if died and s.get("stopped_by"):
        stop += f"; the clients saw: {s['stopped_by']}"
    cmd = f"{n} x POST /v1/sessions (8 clients), idle"
    figs = [figure("g", "live idle sessions reached", cmd, 1, live, "sessions", n, better="higher",
                   note=f"stopped by: {stop}" if stop else None)]
    at = s.get("costs_at")
    if s.get("memory_per_session_bytes") is not None:
        cg = s.get("cgroup_memory_per_session_bytes")
        early = (f"measured at {at} live" + ("" if s.get("measured_at") else ", the last stage before the daemon "
                                              "died")) if died or s.get("capped_at") else None
        figs.append(figure("g", "memory per idle session", f"(MemAvailable at 0 - at {at}) / {at}", 1,
                           s["memory_per_session_bytes"] / MiB, "MiB", 1.0,
                           reference=f"session cgroup memory {cg / MiB:.2f} MiB each" if cg else None,
                           note="; ".join(x for x in (early, "MemAvailable is host-wide: other work on the host "
                                                      "moves it") if x)))
        figs.append(figure("g", f"daemon RSS at {at} live", "VmRSS of cela serve", 1,
                           s["daemon_rss_at_n_bytes"] / MiB, "MiB", 96, note=early))
        kinds = ", ".join(f"{k} {v}" for k, v in (s.get("daemon_fds_per_session_by_kind") or {}).items())
        figs.append(figure("g", "daemon fds per idle session", f"(/proc/<daemon>/fd at {at} - at 0) / {at}", 1,
                           s["daemon_fds_per_session"], "fds", None,
                           note=f"by kind: {kinds}; RLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[1]} / "
                           "this = the most sessions the daemon can hold"))
    m = s.get("measured_at") or live
    capped = (f"measured at {m} live, 90% of the descriptors the daemon had left (running out crashes it "
              "today); a second ramp went on to the target") if s.get("capped_at") else None
    for name, what in (("create", "cold create p50"), ("exec_roundtrip", "exec round trip p50")):
        at_n, zero = s.get(f"{name}_n_p50_ms"), s.get(f"{name}_0_p50_ms")
        if at_n is not None:
            note = "; ".join(x for x in (capped, s.get("create_n_note") if name == "create" else None) if x)
            figs.append(figure("g", f"{what} at {m} live", f"as (e) / (c), {runs} runs each", runs, at_n, "ms",
                               1.3, reference=f"{zero:.2f} ms at 0 live", ratio=at_n / zero,
                               ratio_of=f"at {m} / at 0", note=note or None))
        elif zero is not None:
            why = "the daemon died (below)" if died else (s.get("create_n_error") or "not measured")
            figs.append(skipped("g", f"{what} at {live} live", f"as (e) / (c); {zero:.2f} ms at 0 live", why))
    if s.get("delete_all_s") is not None:
        error = s.get("delete_error")
        figs.append(figure("g", f"delete all {s['deleted']}", "DELETE /v1/sessions/{id} on 8 keep-alive connections",
                           1, None if error else s["delete_all_s"], "s", 15.0, note=f"failed: {error}" if error else None))
    if died:
        figs.append(skipped("g", "the daemon died", "cela serve", f"{died} (its exit took "
                            f"{s.get('crashed_exit_s') or 0:.0f} s; left before recovery: {s.get('leftovers_after_crash')}; "
                            f"recovery on restart took {s.get('recovery_s') or 0:.0f} s)"))
    for when in ("after_delete", "after_stop"):
        left = s.get(f"leftovers_{when}")
        if left:
            count = sum(v for k, v in left.items() if k != "none")
            detail = ", ".join(f"{k} {v}" for k, v in left.items() if k != "none")
            if when == "after_stop" and (s.get("leftovers_at_stop") or {}).get("loop_devices"):
                detail += (f" (loop devices {s['leftovers_at_stop']['loop_devices']} right at the stop; waited "
                           f"{s['leftovers_released_s']:.0f} s for the kernel to let go of them)")
            if count and s.get("daemon_log"):
                detail += f"; the daemon's log: {s['daemon_log']}"
            figs.append(figure("g", f"left behind {when.replace('_', ' ')}",
                               "cgroups, loop devices, mounts, uid slot locks, processes of this daemon", 1, count,
                               "items", 0, note=detail))
    return figs


def seccomp_figure(cela, rounds, raw):
    out = seccomp_cache(cela, rounds)
    raw["seccomp_cache"] = out
    seq = "; ".join(f"{k}: {' '.join(v['runs'])}" for k, v in out["copies"].items())
    return figure("h", "seccomp cache misses, two builds alternating",
                  "two copies of cela (other inode, mtime), in turn: cela run --template host -- /bin/true",
                  2 * rounds, out["misses_after_first"], f"of {out['runs_after_first']} runs", 0,
                  note=f"{seq} (a first run of each must miss); a run removed the other copy's program "
                  f"{out['evictions']} times; unknown (no program file of the expected name in {out['cache_dir']}): "
                  f"{out['unknown']}; other cela writes meanwhile: {out['foreign_writes']}")


def peer_figures(pe):
    figs = []
    runc = pe["runc"]
    if "skipped" in runc:
        figs.append(skipped("a", "runc one-shot", "runc run", runc["skipped"]))
    else:
        r = runc["one_shot"]
        figs.append(figure("a", "runc one-shot p50", r["command"], r["runs"], r["p50_ms"], "ms", None))
    dk = pe["docker"]
    if "skipped" in dk:
        figs.append(skipped("a/c/e", "Docker rows", "docker run / exec", dk["skipped"]))
    else:
        for fid, key, what in (("a", "one_shot", "docker one-shot p50"), ("e", "create", "docker create p50"),
                               ("c", "exec_roundtrip", "docker exec p50")):
            r = dk[key]
            figs.append(figure(fid, what, r["command"], r["runs"], r["p50_ms"], "ms", None))
    return figs


def fmt(v, unit=""):
    if v is None:
        return ""
    if isinstance(v, float):
        v = f"{v:.2f}" if abs(v) < 1000 else f"{v:.0f}"
    return f"{v} {unit}".strip()


def markdown(report):
    m = report["meta"]
    lines = [f"# cela benchmark report ({m['date']})", "",
             f"{m['cela']} at {m['commit']}; kernel {m['kernel']}, {m['cpus']} CPUs, {m['mem_total_mib']} MiB; "
             f"{m['seconds']:.0f} s in all; 1-min load {m['load_1min'][0]:.1f} at the start, "
             f"{m['load_1min'][1]:.1f} at the end (other work on the host skews every figure). Targets: issue 13. Medians (p50) unless said; x bwrap: the value "
             "over bubblewrap's one-shot p50 of (a), the floor reference.", "",
             "| fig | measure | command | runs | value | x bwrap | reference | ratio | target | met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for f in report["figures"]:
        target = ""
        if f["target"] is not None:
            sign = "<=" if f["better"] == "lower" else ">="
            target = f"{sign} {fmt(f['target'])}{'x' if f['ratio_of'] else ' ' + (f['unit'] or '')}".strip()
        ratio = f"{f['ratio']:.2f}x ({f['ratio_of']})" if f["ratio"] is not None else ""
        met = {True: "yes", False: "**no**", None: ""}[f["met"]]
        ref = "; ".join(x for x in (f["reference"], f["note"]) if x)
        cmd = f["command"].replace("|", "\\|")
        vs = f"{f['vs_bwrap']:.2f}x" if f.get("vs_bwrap") is not None else ""
        lines.append(f"| {f['id']} | {f['what']} | `{cmd}` | {f['runs']} | {fmt(f['value'], f['unit'])} | {vs} | "
                     f"{ref.replace('|', '/')} | {ratio} | {target} | {met} |")
    return "\n".join(lines) + "\n"


def plot(report, path):
    """Each figure with a target as value / target (lower is better: at most 1 meets
    it; higher-is-better figures as target / value), and the one-shot p50s."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [f for f in report["figures"] if f["target"] not in (None, 0) and (f["ratio"] if f["ratio_of"] else f["value"])]
    labels, values, colors = [], [], []
    for f in rows:
        judged = f["ratio"] if f["ratio_of"] else f["value"]
        v = judged / f["target"] if f["better"] == "lower" else (f["target"] / judged if judged else 0)
        labels.append(f"({f['id']}) {f['what']}")
        values.append(v)
        colors.append("tab:green" if f["met"] else "tab:red")
    raw = report["raw"].get("spawn_0", {})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, max(4, 0.45 * len(labels) + 1.5)),
                                   gridspec_kw={"width_ratios": [3, 2]})
    ax1.barh(range(len(values)), values, color=colors)
    ax1.set_yticks(range(len(values)), labels, fontsize=8)
    ax1.invert_yaxis()
    ax1.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax1.set_xlabel("measured / target (<= 1 meets the target)")
    ax1.set_title("issue 13 targets")
    names = [n for n in ("fork+exec", "bwrap", "cela") if n in raw]
    ax2.boxplot([raw[n] for n in names], labels=names, showfliers=False)
    ax2.set_ylabel("ms")
    ax2.set_title("one-shot /bin/true (a)")
    fig.suptitle(f"cela bench {report['meta']['date']} ({report['meta']['commit']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "describe", "--always", "--dirty"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cela", default="build/cela")
    ap.add_argument("--runs", type=int, default=100, help="samples of (c), (d); (e) takes half")
    ap.add_argument("--spawn-runs", type=int, default=200, help="interleaved rounds of (a); (b) takes half")
    ap.add_argument("--sessions", type=int, default=5000, help="live idle sessions of (g)")
    ap.add_argument("--loaded", type=int, default=500, help="live sessions of (b)")
    ap.add_argument("--scale-runs", type=int, default=30, help="samples of (g)'s create and exec at 0 and at N")
    ap.add_argument("--throughput-sessions", type=int, default=200, help="creates of (f)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--template", default="base", help="of the sessions of (c)-(g)")
    ap.add_argument("--seccomp-rounds", type=int, default=5)
    ap.add_argument("--peer-runs", type=int, default=20)
    ap.add_argument("--docker-image")
    ap.add_argument("--quick", action="store_true", help="a tenth of every count (a smoke run)")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    if a.quick:
        for k in ("runs", "spawn_runs", "sessions", "loaded", "scale_runs", "throughput_sessions", "peer_runs"):
            setattr(a, k, max(5, getattr(a, k) // 10))
        a.seccomp_rounds = 3
    if os.geteuid() != 0:
        raise SystemExit("run as root (cela run and cela serve need it)")
    Daemon = harness.daemon_util(a.cela).Daemon
    load_0 = os.getloadavg()[0]
    t0 = time.monotonic()
    raw, figs = {}, []

    def step(name):
        print(f"[{time.monotonic() - t0:6.1f} s] {name}", flush=True)

    step(f"(a) spawn, {a.spawn_runs} interleaved rounds")
    rows, cela_0, bwrap_0 = spawn_figures(a.cela, a.spawn_runs, raw)
    figs += rows
    step(f"(h) seccomp cache, {a.seccomp_rounds} rounds")
    figs.append(seccomp_figure(a.cela, a.seccomp_rounds, raw))
    step("peers: runc, docker")
    raw["peers"] = pbench.peers(a.peer_runs, a.docker_image)
    figs += peer_figures(raw["peers"])

    step(f"(c)-(f) private daemon, {a.template} sessions")
    d = Daemon(harness.many_sessions_config(a.throughput_sessions)).start()
    try:
        figs += daemon_figures(d, a.template, a.runs, a.throughput_sessions, a.clients, raw)
    except (OSError, RuntimeError) as exc:
        figs.append(skipped("c-f", "daemon figures", "cela serve", f"{type(exc).__name__}: {exc}"))
    finally:
        cf = {}
        sbench.finish(d, cf)
        raw["daemon_cf_leftovers"] = cf
        if not cf["leftovers_after_stop"]["none"]:
            figs.append(figure("f", "left behind by the (c)-(f) daemon", "its sessions' cgroups, loop devices, ...", 1,
                               sum(v for k, v in cf["leftovers_after_stop"].items() if k != "none"), "items", 0,
                               note=str(cf["leftovers_after_stop"])))

    step(f"(g) {a.sessions} live sessions, (b) at {a.loaded}")
    d = Daemon(harness.many_sessions_config(a.sessions)).start()
    g = {}
    try:
        hook = spawn_at_load(a.cela, max(10, a.spawn_runs // 2), cela_0, bwrap_0, raw)
        g = sbench.scale(d, a.sessions, a.scale_runs, dbench.session_body(a.template), a.clients,
                         hooks={a.loaded: hook})
    finally:
        step("(g) stopping the daemon")
        os.makedirs(a.out, exist_ok=True)
        sbench.finish(d, g, keep_log=os.path.join(a.out, "scale-daemon.log"))
    raw["scale"] = g
    with open(os.path.join(a.out, "raw.json"), "w") as fh:  # the samples, should the rendering fail
        json.dump(raw, fh)
    s = sbench.summarize(g)
    b = g.get("hooks", {}).get(str(a.loaded))
    if b:
        figs.insert(2, figure("b", f"one-shot run p50 with {b['live']} live sessions",
                              "cela run --template host -- /bin/true", max(10, a.spawn_runs // 2), b["cela_p50_ms"],
                              "ms", 1.1, reference=f"(a) {cela_0:.2f} ms; bwrap now {b['bwrap_p50_ms']:.2f} ms "
                              f"({b['bwrap_ratio_to_a']:.2f}x its (a)): the machine's noise; cela/bwrap "
                              f"{b['cela_p50_ms'] / b['bwrap_p50_ms']:.2f}x now, {cela_0 / bwrap_0:.2f}x in (a)",
                              ratio=b["ratio_to_a"],
                              ratio_of="loaded / (a)"))
    else:
        why = (f"--loaded {a.loaded} is not below --sessions {a.sessions}" if a.loaded >= a.sessions else
               f"the daemon stopped at {s.get('reached')} sessions: {s.get('stopped_by') or s.get('error')}")
        figs.insert(2, skipped("b", f"one-shot run with {a.loaded} live", "cela run --template host -- /bin/true", why))
    figs += scale_figures(s, a.sessions)
    order = "abcdefgh"
    figs.sort(key=lambda f: order.index(f["id"][0]))
    for f in figs:  # bubblewrap's one-shot p50 is the floor every latency is held against
        f["vs_bwrap"] = f["value"] / bwrap_0 if f["unit"] == "ms" and f["value"] is not None else None

    mem_total = sbench.meminfo("MemTotal") // MiB
    report = {"meta": {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "cela": os.path.relpath(os.path.abspath(a.cela)), "commit": git_commit(),
                       "kernel": os.uname().release, "cpus": os.cpu_count(), "mem_total_mib": mem_total,
                       "seconds": time.monotonic() - t0, "load_1min": [load_0, os.getloadavg()[0]],
                       "args": vars(a)},
              "figures": figs, "summary_g": s, "raw": raw}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "report.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    md = markdown(report)
    with open(os.path.join(a.out, "report.md"), "w") as fh:
        fh.write(md)
    plot(report, os.path.join(a.out, "report.png"))
    print(md)
    print(f"wrote {a.out}/report.json, report.md, report.png")


if __name__ == "__main__":
    sys.exit(main())
