#!/usr/bin/python3
"""Peer runtimes as reference rows: runc and Docker, when they are installed and work
on this machine (runc on PATH; `docker info` succeeds), each skipped with the reason
otherwise. Nothing is pulled: Docker uses an image already on the machine
(--docker-image, else the first local one). A benchmark, not a test.

    python3 bench/peers.py [--runs 20]

runc: `runc run` of /bin/true in a bundle whose read-only root holds the host's /usr
(bind-mounted read-only), like cela's host template and bwrap's reference.
Docker: `docker run --rm --network none IMAGE /bin/true`; `docker run -d ... sleep`
(create until running); `docker exec` of /bin/true in it, all through the CLI.
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time

from stats import pct


def timed_run(argv, timeout=60):
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    return (time.perf_counter() - t0) * 1000


def row(command, samples, **extra):
    return {"command": command, "runs": len(samples), "p50_ms": pct(samples, .5), "p95_ms": pct(samples, .95),
            **extra}


def why(exc):
    if isinstance(exc, subprocess.CalledProcessError):
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        return f"`{' '.join(exc.cmd[:3])} ...` failed: {err[-1] if err else exc.returncode}"
    return f"{type(exc).__name__}: {exc}"


def runc_rows(runs):
    runc = shutil.which("runc")
    if not runc:
        return {"skipped": "runc is not on PATH"}
    tmp = tempfile.mkdtemp(prefix="cela-bench-runc-")
    try:
        bundle, state = os.path.join(tmp, "bundle"), os.path.join(tmp, "state")
        rootfs = os.path.join(bundle, "rootfs")
        for d in ("usr", "proc", "dev", "tmp", "sys"):
            os.makedirs(os.path.join(rootfs, d))
        for link in ("bin", "lib", "lib64", "sbin"):
            os.symlink(f"usr/{link}", os.path.join(rootfs, link))
        subprocess.run([runc, "spec"], cwd=bundle, check=True, capture_output=True)
        path = os.path.join(bundle, "config.json")
        with open(path) as f:
            spec = json.load(f)
        spec["process"].update({"args": ["/bin/true"], "terminal": False})
        spec["root"] = {"path": "rootfs", "readonly": True}
        spec["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]})
        with open(path, "w") as f:
            json.dump(spec, f)
        argv = [runc, "--root", state, "run", "--bundle", bundle]
        samples = [timed_run(argv + [f"cela-bench-{os.getpid()}-{i}"]) for i in range(runs)]
        return {"one_shot": row("runc run (host /usr read-only, /bin/true)", samples)}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"skipped": why(exc)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def docker_rows(runs, image=None):
    docker = shutil.which("docker")
    if not docker:
        return {"skipped": "docker is not on PATH"}
    info = subprocess.run([docker, "info"], capture_output=True, text=True)
    if info.returncode != 0:
        last = (info.stderr or info.stdout).strip().splitlines()
        return {"skipped": "`docker info` failed: " + (last[-1] if last else str(info.returncode))}
    if not image:
        images = subprocess.run([docker, "images", "--format", "{{.Repository}}:{{.Tag}}"],
                                capture_output=True, text=True).stdout.split()
        images = [i for i in images if not i.endswith(":<none>")]
        if not images:
            return {"skipped": "no Docker image on this machine (nothing is pulled; --docker-image)"}
        image = images[0]
    name = f"cela-bench-{os.getpid()}"
    try:
        one = [timed_run([docker, "run", "--rm", "--network", "none", image, "/bin/true"]) for _ in range(runs)]
        create = []
        for i in range(max(3, runs // 4)):
            create.append(timed_run([docker, "run", "-d", "--network", "none", "--name", f"{name}-{i}", image,
                                     "sleep", "3600"]))
            subprocess.run([docker, "rm", "-f", f"{name}-{i}"], capture_output=True)
        subprocess.run([docker, "run", "-d", "--network", "none", "--name", name, image, "sleep", "3600"],
                       check=True, capture_output=True)
        execs = [timed_run([docker, "exec", name, "/bin/true"]) for _ in range(runs)]
        return {"image": image,
                "one_shot": row(f"docker run --rm --network none {image} /bin/true", one),
                "create": row(f"docker run -d --network none {image} sleep 3600", create),
                "exec_roundtrip": row("docker exec CONTAINER /bin/true", execs)}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"skipped": why(exc)}
    finally:
        subprocess.run([docker, "rm", "-f", name], capture_output=True)


def peers(runs, docker_image=None):
    return {"runc": runc_rows(runs), "docker": docker_rows(runs, docker_image)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--docker-image")
    a = ap.parse_args()
    print(json.dumps(peers(a.runs, a.docker_image), indent=1))


if __name__ == "__main__":
    main()
