"""`resolve daemon` as a process of a test suite's: its own config directory, up once its log says
every listener it needs is bound, stopped with SIGTERM (then SIGKILL after 10 s) and cleaned up.
Shared by the forgery matrix and the differential conformance test."""
import os
import shutil
import subprocess
import tempfile
import time


class ResolveDaemon:
    def __init__(self, binary, config, listeners=("dns stub listening", "[ResolverDaemon] listening"), prefix="resolve-daemon-"):
        """`config` is the YAML text, or a function of the config directory returning it."""
        self.directory = tempfile.mkdtemp(prefix=prefix)
        self.config = os.path.join(self.directory, "daemon.yaml")
        with open(self.config, "w") as file:
            file.write(config(self.directory) if callable(config) else config)
        self.log = open(os.path.join(self.directory, "log"), "w+")
        self.process = subprocess.Popen([binary, "daemon", "--config", self.config, "--log-level", "info"],
                                        stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("the daemon exited: " + self.text())
            if all(line in self.text() for line in listeners):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the daemon did not come up: " + self.text())

    def text(self):
        self.log.flush()
        with open(self.log.name) as file:
            return file.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
