#!/usr/bin/env python3
"""Seeded fault injection into a real actorpipe job: node processes over loopback, a coordinator training a
D x P mesh on them with --restart-on-failure, and between the coordinator and every node (and between nodes) a
TCP proxy of this script's own. While the job trains, faults are injected at moments drawn from the seed:

  kill   kill -9 of a node, started again on its port after a while (a replacement at its address)
  stop   SIGSTOP of a node for a while, then SIGCONT
  cut    every connection through the node's proxy closed at once
  delay  the node's proxy holds each chunk it forwards for a while, for a while
  flip   (with --insecure) one bit flipped in the next chunk the node's proxy forwards

The same job runs first without faults. The script checks, and prints as a table and one JSON line:
  - the run ended, with every fault survived (a lost node recovered from its snapshot, Note [recovery]);
  - its exported weights equal the uninterrupted run's bit for bit, and its losses, accuracy and steps;
  - every checkpoint copied from disk while it ran loads (`train --resume COPY` with as many steps as it holds);
  - no process it started is left, and none ended on its own (a crash);
  - faults injected by kind, and the seconds each cost: the longest wait for a new step between it and the next
    fault (from the fault on), less a step's median time (median and max).
The faults are drawn from --seed alone: the same seed injects the same faults, each a drawn while after the job
trains again following the one before (so each fault meets a running job, and its cost is its own); the run's
own pace moves what they hit. The job is long enough for them (--epochs: 2 per fault, at least 6). Exit status 0
when every check passes, 1 otherwise. With --work, each proxy's connections and the faults at it are logged
with their monotonic times (proxyN.log), beside the nodes' (nodeN.err) and the job's logs.

  scripts/fault_injector.py --actorpipe build/cli/actorpipe --seed 7 --faults 8            # the suite's short form
  scripts/fault_injector.py --actorpipe build/cli/actorpipe --seed 1 --faults 100 --epochs 400 --tls  # the long form
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

KINDS = ["kill", "stop", "cut", "delay", "flip"]


class Proxy:
    """Forwards a listening port on 127.0.0.1 to a node's port, with faults: cut, delay, flip."""

    def __init__(self, target_port, rng_seed, log_path=None):
        self.target_port = target_port
        self.log_file = open(log_path, "a", buffering=1) if log_path else None
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.pairs = []  # (client, upstream) sockets
        self.delay_s = 0.0
        self.flips = 0  # bits still to flip
        self.flipped = 0
        self.rng = random.Random(rng_seed)  # which bit: drawn from the seed too
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def log(self, text):
        """One line per connection event, with the monotonic time, when the proxy has a log."""
        if self.log_file:
            self.log_file.write("%.3f %s\n" % (time.monotonic(), text))

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
                upstream.settimeout(None)
            except OSError as e:
                self.log("from %d: upstream to %d failed: %s" % (client.getpeername()[1], self.target_port, e))
                client.close()  # the node is down: as a refused connection
                continue
            try:
                for s in (client, upstream):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.log("from %d: upstream %d -> %d" % (client.getpeername()[1], upstream.getsockname()[1],
                                                         self.target_port))
            except OSError as e:  # the client hung up already
                self.log("a connection ended before it was forwarded: %s" % e)
                client.close()
                upstream.close()
                continue
            with self.lock:
                self.pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, src, dst):
        why = "end of stream"
        try:
            names = "%d -> %d" % (src.getpeername()[1], dst.getpeername()[1])
        except OSError:
            names = "?"
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                with self.lock:
                    delay = self.delay_s
                    flip = self.flips > 0 and len(data) > 64
                    if flip:
                        self.flips -= 1
                        self.flipped += 1
                        at = self.rng.randrange(len(data))
                        bit = self.rng.randrange(8)
                if delay > 0:
                    time.sleep(delay)
                if flip:
                    data = bytearray(data)
                    data[at] ^= 1 << bit
                    data = bytes(data)
                dst.sendall(data)
        except OSError as e:
            why = str(e)
        self.log("%s ended: %s" % (names, why))
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def cut(self):
        self.log("cut")
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.closed = True
        self.listener.close()
        self.cut()


class Node:
    """An `actorpipe node` process and its proxy."""

    def __init__(self, actorpipe, transport, index, seed, log_dir):
        self.actorpipe, self.transport, self.index, self.log_dir = actorpipe, transport, index, log_dir
        self.port = 0
        self.processes = []  # every process started for this node, to check none is left
        self.killed = set()  # the pids this script killed
        self.start()
        self.proxy = Proxy(self.port, seed * 1000 + index, os.path.join(log_dir, "proxy%d.log" % index))

    def start(self, attempts=20):
        for _ in range(attempts):
            err = open(os.path.join(self.log_dir, "node%d.err" % self.index), "ab")
            p = subprocess.Popen([self.actorpipe, "node", "--host", "127.0.0.1", "--port", str(self.port)] + self.transport,
                                 stdout=subprocess.PIPE, stderr=err, text=True)
            line = p.stdout.readline().strip()
            if line.startswith("node listening on "):
                self.port = int(line.rsplit(":", 1)[1])
                self.process = p
                self.processes.append(p)
                return
            p.wait()
            time.sleep(0.2)  # the port still held by the killed process's last connection: try again
        raise RuntimeError("node %d did not start on port %d" % (self.index, self.port))

    def address(self):
        return "127.0.0.1:%d" % self.proxy.port

    def crashed(self):
        """The processes of this node that ended on their own (a crash), as (pid, exit status)."""
        return [(p.pid, p.returncode) for p in self.processes if p.poll() is not None and p.pid not in self.killed]

    def stop(self):
        self.proxy.close()
        for p in self.processes:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
                p.kill()
            p.wait()


def draw_faults(seed, count, kinds, nodes):
    """The fault schedule, drawn from the seed alone: each fault's wait after the job trains again (s), kind, node,
    how long it lasts (s: a killed node's time down, a stop's, a delay's) and, for a delay, each chunk's."""
    rng = random.Random(seed)
    faults = []
    for _ in range(count):
        gap = rng.uniform(0.2, 1.0)
        kind = rng.choice(kinds)
        duration = {"kill": rng.uniform(0.2, 1.5), "stop": rng.uniform(0.5, 8.0), "cut": 0.0,
                    "delay": rng.uniform(0.5, 2.0), "flip": 0.0}[kind]
        faults.append({"after_s": round(gap, 3), "kind": kind, "node": rng.randrange(nodes),
                       "duration_s": round(duration, 3), "chunk_delay_s": round(rng.uniform(0.02, 0.2), 3)})
    return faults


def steps_in(log_path):
    """The step of each step line in the metrics log so far."""
    out = []
    try:
        with open(log_path) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if "loss" in j:
                    out.append(j["step"])
    except OSError:
        pass
    return out


class StepWatcher(threading.Thread):
    """Notes when each new step first appears in the metrics log."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.seen, self.lock, self.done = path, {}, threading.Lock(), False

    def run(self):
        while not self.done:
            now = time.monotonic()
            for step in steps_in(self.path):
                with self.lock:
                    self.seen.setdefault(step, now)
            time.sleep(0.02)

    def snapshot(self):
        with self.lock:
            return dict(self.seen)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--actorpipe", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--faults", type=int, default=8)
    ap.add_argument("--kinds", default=",".join(KINDS), help="a comma-separated subset of " + ",".join(KINDS))
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--data-parallel", type=int, default=2)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=0, help="the job's epochs of 32 steps (0: 2 per fault, at least 6)")
    ap.add_argument("--tls", action="store_true", help="mutual TLS (no flips: a flipped bit ends a TLS record like a cut)")
    ap.add_argument("--work", default="", help="a folder for the files (default: a temporary one, removed)")
    ap.add_argument("--time-scale", type=float, default=float(os.environ.get("AP_TEST_TIME_SCALE", "1") or 1))
    a = ap.parse_args()
    a.epochs = a.epochs or max(6, 2 * a.faults)
    actorpipe = os.path.abspath(a.actorpipe)
    kinds = [k for k in a.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            sys.exit("fault_injector: unknown kind '%s' (%s)" % (k, ", ".join(KINDS)))
    if a.tls and "flip" in kinds:
        kinds.remove("flip")
    work = a.work or tempfile.mkdtemp(prefix="fault_injector_")
    os.makedirs(work, exist_ok=True)
    transport = ["--insecure"]
    coordinator_transport = ["--insecure"]
    if a.tls:
        certs = os.path.join(work, "certs")
        subprocess.run([os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_test_certs.sh"), certs],
                       check=True)
        transport = ["--tls-ca", certs + "/ca.pem", "--tls-cert", certs + "/node.pem", "--tls-key", certs + "/node.key"]
        coordinator_transport = ["--tls-ca", certs + "/ca.pem", "--tls-cert", certs + "/coordinator.pem",
                                 "--tls-key", certs + "/coordinator.key"]
    nodes = [Node(actorpipe, transport, i, a.seed, work) for i in range(a.nodes)]
    checks, report = [], {}
    try:
        def job(name, faults_left):
            return [actorpipe, "train", "--stages", str(a.stages), "--data-parallel", str(a.data_parallel),
                    "--microbatches", "4", "--train-limit", "2048", "--epochs", str(a.epochs), "--batch-size", "64",
                    "--threads", "1", "--nodes", ",".join(n.address() for n in nodes),
                    "--restart-on-failure", str(faults_left), "--restart-wait-ms", str(int(60000 * a.time_scale)),
                    "--snapshot-every", "5", "--checkpoint", os.path.join(work, name + ".safetensors"),
                    "--checkpoint-every", "10", "--export", os.path.join(work, name + ".weights.safetensors"),
                    "--log", os.path.join(work, name + ".jsonl")] + coordinator_transport

        def run_to_end(argv, name):
            with open(os.path.join(work, name + ".err"), "w") as err:
                p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True, timeout=1800 * a.time_scale)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            return p.returncode, (json.loads(lines[-1]) if lines else {})

        t0 = time.monotonic()
        code, expected = run_to_end(job("uninterrupted", 1), "uninterrupted")
        uninterrupted_s = time.monotonic() - t0
        if code != 0:
            sys.exit("fault_injector: the run without faults failed (%s)" % os.path.join(work, "uninterrupted.err"))
        faults = draw_faults(a.seed, a.faults, kinds, a.nodes)
        print("fault_injector: seed %d, %d faults into a %d x %d mesh on %d nodes (%s); the run without them took %.1f s:" %
              (a.seed, len(faults), a.data_parallel, a.stages, a.nodes, "mutual TLS" if a.tls else "plain TCP",
               uninterrupted_s))
        for f in faults:
            print("  %.3f s after the job trains: %-5s node %d%s" % (
                f["after_s"], f["kind"], f["node"], " for %.3f s" % f["duration_s"] if f["duration_s"] else ""))
        sys.stdout.flush()

        log = os.path.join(work, "faulted.jsonl")
        err = open(os.path.join(work, "faulted.err"), "w")
        coordinator = subprocess.Popen(job("faulted", 10 * len(faults) + 10), stdout=subprocess.PIPE, stderr=err, text=True)
        watcher = StepWatcher(log)
        watcher.start()
        while not watcher.snapshot() and coordinator.poll() is None:
            time.sleep(0.01)
        start = time.monotonic()
        copies, injected, resumed = [], [], True
        trains_again_within = 120 * a.time_scale
        for f in faults:
            # The job trains again (a step after those seen when the last fault ended), then the drawn wait.
            seen = watcher.snapshot()
            mark = max(seen) if seen else -1
            t = time.monotonic()
            while coordinator.poll() is None and max(watcher.snapshot() or [-1]) <= mark and \
                    time.monotonic() - t < trains_again_within:
                time.sleep(0.005)
            if coordinator.poll() is None and max(watcher.snapshot() or [-1]) <= mark:
                resumed = False
            time.sleep(f["after_s"])
            if coordinator.poll() is not None:
                break
            n = nodes[f["node"]]
            seen = watcher.snapshot()
            f["last_step"] = max(seen) if seen else -1
            f["when"] = time.monotonic()
            n.proxy.log("fault %s for %.3f s" % (f["kind"], f["duration_s"]))
            if f["kind"] == "kill":
                n.killed.add(n.process.pid)
                n.process.kill()
                n.process.wait()
                time.sleep(f["duration_s"])
                n.start()
                n.proxy.log("node started again, pid %d" % n.process.pid)
            elif f["kind"] == "stop":
                n.process.send_signal(signal.SIGSTOP)
                time.sleep(f["duration_s"])
                n.process.send_signal(signal.SIGCONT)
            elif f["kind"] == "cut":
                n.proxy.cut()
            elif f["kind"] == "delay":
                n.proxy.delay_s = f["chunk_delay_s"]
                time.sleep(f["duration_s"])
                n.proxy.delay_s = 0.0
            elif f["kind"] == "flip":
                with n.proxy.lock:
                    n.proxy.flips += 1
                t = time.monotonic()
                while n.proxy.flips > 0 and coordinator.poll() is None and time.monotonic() - t < 10 * a.time_scale:
                    time.sleep(0.005)  # flipped in the next chunk of more than 64 bytes
            injected.append(f)
            checkpoint = os.path.join(work, "faulted.safetensors")
            if os.path.exists(checkpoint) and len(copies) < 5:  # a checkpoint as it lies on disk now
                copy = os.path.join(work, "copy%d.safetensors" % len(copies))
                try:
                    shutil.copyfile(checkpoint, copy)
                    copies.append(copy)
                except OSError:
                    pass
        out, _ = coordinator.communicate(timeout=1800 * a.time_scale)
        err.close()
        watcher.done = True
        watcher.join()
        lines = [l for l in out.splitlines() if l.startswith("{")]
        got = json.loads(lines[-1]) if lines else {}
        checks.append(("every fault injected into the running job (%d of %d)" % (len(injected), len(faults)),
                       len(injected) == len(faults)))
        checks.append(("the job trained again after every fault, within %d s" % trains_again_within, resumed))
        checks.append(("the run ended (exit 0, a result)", coordinator.returncode == 0 and bool(got)))
        same = all(got.get(k) == expected.get(k) for k in ("last_step_loss", "last_epoch_mean_loss", "test_accuracy", "steps"))
        checks.append(("its losses, test accuracy and steps equal the uninterrupted run's", same))
        def read(name):
            try:
                with open(os.path.join(work, name + ".weights.safetensors"), "rb") as f:
                    return f.read()
            except OSError:
                return None
        weights = read("faulted")
        checks.append(("its weights equal the uninterrupted run's bit for bit",
                       weights is not None and weights == read("uninterrupted")))
        loads = True
        for copy in copies:
            with open(copy, "rb") as f:  # safetensors: an 8-byte length, then the JSON header
                header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            step = int(header["__metadata__"]["step"])
            code, _ = run_to_end([actorpipe, "train", "--resume", copy, "--train-limit", "2048", "--batch-size", "64",
                                  "--epochs", str(a.epochs), "--max-steps", str(step), "--threads", "1"], "load")
            loads = loads and code == 0
        checks.append(("every checkpoint copied from disk while it ran loads (%d)" % len(copies), loads))
        seen = watcher.snapshot()
        times = sorted(seen.values())
        pace = statistics.median([b - a_ for a_, b in zip(times, times[1:])]) if len(times) > 2 else 0.0
        lost = []
        end = time.monotonic()
        for i, f in enumerate(injected):
            # The longest wait for a new step between this fault and the next, less a step's usual time.
            until = injected[i + 1]["when"] if i + 1 < len(injected) else end
            arrivals = sorted(t for s, t in seen.items() if s > f["last_step"] and f["when"] <= t <= until)
            marks = [f["when"]] + arrivals
            if arrivals:
                lost.append(max(0.0, max(b - a_ for a_, b in zip(marks, marks[1:])) - pace))
        report = {"seed": a.seed, "faults": len(injected), "by_kind": {k: sum(f["kind"] == k for f in injected) for k in KINDS},
                  "flipped_bits": sum(n.proxy.flipped for n in nodes), "restarts": got.get("restarts"),
                  "survived": len(injected) if coordinator.returncode == 0 and resumed else 0,
                  "seconds_lost_median": round(statistics.median(lost), 3) if lost else None,
                  "seconds_lost_max": round(max(lost), 3) if lost else None,
                  "run_s": round(time.monotonic() - start, 1), "uninterrupted_s": round(uninterrupted_s, 1),
                  "mesh": "%d x %d" % (a.data_parallel, a.stages), "nodes": a.nodes, "tls": a.tls}
    finally:
        crashes = ["node %d: pid %d ended on its own with status %s" % (i, pid, code)
                   for i, n in enumerate(nodes) for pid, code in n.crashed()]
        for n in nodes:
            n.stop()
    for c in crashes:  # a signal is a negative status; the node's log (nodeN.err) ends with what it said
        print("fault_injector: " + c, file=sys.stderr)
    checks.append(("no node process ended on its own (a crash)", not crashes))
    left = [p.pid for n in nodes for p in n.processes if p.poll() is None]
    checks.append(("no process it started is left", not left))
    report["checks_passed"] = all(ok for _, ok in checks)
    print("| check | passed |\n| --- | --- |")
    for what, ok in checks:
        print("| %s | %s |" % (what, "yes" if ok else "NO"))
    print("| faults injected (kill, stop, cut, delay, flip) | %s |" % ", ".join(str(report["by_kind"][k]) for k in KINDS))
    print("| seconds lost per fault, median / max | %s / %s |" % (report["seconds_lost_median"], report["seconds_lost_max"]))
    print(json.dumps(report))
    if not a.work and report["checks_passed"]:
        shutil.rmtree(work, ignore_errors=True)
    elif not report["checks_passed"]:
        print("fault_injector: the files are in " + work, file=sys.stderr)
    sys.exit(0 if report["checks_passed"] else 1)


if __name__ == "__main__":
    main()
