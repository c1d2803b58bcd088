"""A real single-node SLURM for the tests: Debian's munge, slurmctld and slurmd started as daemons
(no systemd), a GRES of four fake GPUs so that GPU jobs schedule, no slurmdbd (so `sacct` does not
work, as on many small clusters). Everything lives in one folder; the daemons are stopped by pid.

SLURM 22.05 drops a GPU GRES without device files ("Removing file-less GPU"), so the fake GPUs
are character devices made with mknod as copies of /dev/null (major 1, minor 3): countable, and
nothing a job could use.

The configuration goes to SLURM's default place, /etc/slurm/slurm.conf: jobs' nested `srun` calls
(the plugin's job-step executor) drop SLURM_CONF and look there. A configuration already there
that this harness did not write is never touched (the tests are skipped); the harness removes
its own when it stops."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scontrol")


def available() -> str | None:
    """None when SLURM can run here, else what is missing."""
    missing = [d for d in DAEMONS if not shutil.which(d) and not Path(f"/usr/sbin/{d}").exists()]
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client munge)"
    if os.geteuid() != 0:
        return "the test SLURM runs its daemons as root"
    return config_in_the_way()


def _node_line() -> str:
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
    return line


MARK = "# written by the specmoe test harness\n"
ETC = Path("/etc/slurm")


def config_in_the_way() -> str | None:
    conf = ETC / "slurm.conf"
    if conf.exists() and not conf.read_text().startswith(MARK):
        return f"{conf} belongs to a SLURM of this machine; the test cluster will not replace it"
    return None


class Cluster:
    def __init__(self, root: Path, gpus: int = 4):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.conf = ETC / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        self.gpus = gpus
        self.pids: dict[str, int] = {}

    @property
    def env(self) -> dict:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        r = self.root
        for d in ("state", "spool"):
            (r / d).mkdir(exist_ok=True)
        node = _node_line().split()
        node = [w for w in node if not w.startswith(("NodeName=", "UpTime="))]
        ETC.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(MARK + "\n".join([
            "ClusterName=specmoe-test",
            f"SlurmctldHost={self.node}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MailProg=/bin/true",
            "MinJobAge=300",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=1000",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "GresTypes=gpu",
            f"NodeName={self.node} {' '.join(node)} Gres=gpu:{self.gpus} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]))
        for i in range(self.gpus):
            dev = r / f"fakegpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
        (ETC / "gres.conf").write_text(
            MARK + f"NodeName={self.node} Name=gpu File={r}/fakegpu[0-{self.gpus - 1}]\n")

    def _start_munge(self) -> None:
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
            return  # already running (another test session's, or the machine's)
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            key.parent.mkdir(parents=True, exist_ok=True)
            key.write_bytes(os.urandom(1024))
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        run = Path("/run/munge")
        run.mkdir(parents=True, exist_ok=True)
        shutil.chown(run, "munge", "munge")
        subprocess.run(["runuser", "-u", "munge", "--", "munged"], check=True)
        pid = Path("/run/munge/munged.pid")
        for _ in range(50):
            if pid.exists():
                self.pids["munged"] = int(pid.read_text().strip())
                return
            time.sleep(0.1)

    def start(self, timeout: float = 60) -> "Cluster":
        self.write_config()
        self._start_munge()
        env = self.env
        subprocess.run(["slurmctld", "-f", str(self.conf)], env=env, check=True)
        subprocess.run(["slurmd", "-f", str(self.conf)], env=env, check=True)
        for name in ("slurmctld", "slurmd"):
            pidfile = self.root / f"{name}.pid"
            for _ in range(100):
                if pidfile.exists() and pidfile.read_text().strip():
                    self.pids[name] = int(pidfile.read_text().strip())
                    break
                time.sleep(0.1)
        if set(self.pids) < {"slurmctld", "slurmd"}:
            self.stop()
            raise RuntimeError(f"SLURM daemons did not start: {self.logs()}")
        t0 = time.time()
        while time.time() - t0 < timeout:
            r = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() in ("idle", "mixed", "allocated"):
                return self
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"SLURM did not come up: {self.logs()}")

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-20:]))
        return "\n".join(out)

    def jobs(self) -> list[dict]:
        """Every job SLURM still remembers (MinJobAge keeps finished ones for 5 minutes)."""
        r = subprocess.run(["scontrol", "show", "job", "--oneliner"], env=self.env,
                           capture_output=True, text=True, check=True)
        jobs = []
        for line in r.stdout.splitlines():
            if not line.strip() or line.startswith("No jobs"):
                continue
            rec = {}
            for word in line.split():
                if "=" in word:
                    k, v = word.split("=", 1)
                    rec[k] = v
            jobs.append(rec)
        return jobs

    def stop(self) -> None:
        self._stop_daemons()
        for name in ("slurm.conf", "gres.conf"):
            p = ETC / name
            if p.exists() and p.read_text().startswith(MARK):
                p.unlink()

    def _stop_daemons(self) -> None:
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(50):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
