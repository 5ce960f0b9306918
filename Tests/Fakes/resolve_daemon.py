"""`resolve daemon` as a process of a test suite's: its own config directory, up once it says
READY=1 on its sd_notify socket as it would to systemd (every listener bound, the first readiness
check done), stopped with SIGTERM (then SIGKILL after 10 s) and cleaned up. Shared by the forgery
matrix, the differential conformance test and the adversarial suite (`NotifySocket`)."""
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time


class NotifySocket:
    """The receiving end of sd_notify(3), as a service manager holds it: a datagram socket in
    `directory` named to the daemon by NOTIFY_SOCKET, read on a thread for as long as the daemon
    runs (an unread socket would fill and block the daemon's notifications)."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "notify.sock")
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(self.path)
        self.socket.settimeout(0.2)
        self.messages = []
        self.ready = threading.Event()
        self.closed = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while not self.closed:
            try:
                data = self.socket.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            fields = data.decode(errors="replace").split("\n")
            self.messages.append(fields)
            if "READY=1" in fields:
                self.ready.set()

    def environment(self):
        return dict(os.environ, NOTIFY_SOCKET=self.path)

    def wait_ready(self, process, describe, seconds=20):
        """Returns once READY=1 came; raises when the process exits first or `seconds` pass."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.ready.wait(0.1):
                return
            if process.poll() is not None:
                raise RuntimeError("the daemon exited: " + describe())
        raise RuntimeError("the daemon did not say READY=1: " + describe())

    def close(self):
        self.closed = True
        self.socket.close()


class ResolveDaemon:
    def __init__(self, binary, config, prefix="resolve-daemon-"):
        """`config` is the YAML text, or a function of the config directory returning it."""
        self.directory = tempfile.mkdtemp(prefix=prefix)
        self.config = os.path.join(self.directory, "daemon.yaml")
        with open(self.config, "w") as file:
            file.write(config(self.directory) if callable(config) else config)
        self.log = open(os.path.join(self.directory, "log"), "w+")
        self.notify = NotifySocket(self.directory)
        self.process = subprocess.Popen([binary, "daemon", "--config", self.config, "--log-level", "info"],
                                        stdout=subprocess.DEVNULL, stderr=self.log, env=self.notify.environment())
        try:
            self.notify.wait_ready(self.process, self.text)
        except RuntimeError:
            self.stop()
            raise

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
        self.notify.close()
        shutil.rmtree(self.directory, ignore_errors=True)
