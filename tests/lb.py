"""Replicas behind nginx for the load-balancer tests and loadtests: the checked-in
deploy/nginx/nginx.conf, with its upstream servers and listen ports rewritten to loopback, run as
a process of its own (never the system service) with its files in a temporary folder."""
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from helpers import REPO_ROOT, free_ports

NGINX_CONF = REPO_ROOT / "deploy" / "nginx" / "nginx.conf"


def nginx_bin():
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def render(http_ports, grpc_ports, listen_http, listen_grpc, folder: Path) -> str:
    """deploy/nginx/nginx.conf for replicas on loopback `http_ports`/`grpc_ports`, listening on
    `listen_http`/`listen_grpc`, with its temporary files under `folder`."""
    text = NGINX_CONF.read_text()
    for i, (h, g) in enumerate(zip(http_ports, grpc_ports)):
        text, n1 = re.subn(rf"server tritium-{i}\.tritium-headless:8000", f"server 127.0.0.1:{h}", text)
        text, n2 = re.subn(rf"server tritium-{i}\.tritium-headless:8001", f"server 127.0.0.1:{g}", text)
        assert n1 == n2 == 1, f"replica {i} is not in {NGINX_CONF}"
    text, n = re.subn(r"listen 8000;", f"listen 127.0.0.1:{listen_http};", text)
    assert n == 1
    text, n = re.subn(r"listen 8001 http2;", f"listen 127.0.0.1:{listen_grpc} http2;", text)
    assert n == 1
    text = text.replace("worker_processes auto;", "worker_processes 1;")
    temps = "".join(f"    {k}_temp_path {folder / k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return text.replace("http {\n", "http {\n" + temps, 1)


class Nginx:
    def __init__(self, http_ports, grpc_ports, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.http_port, self.grpc_port = free_ports(2)
        conf = self.folder / "nginx.conf"
        conf.write_text(render(http_ports, grpc_ports, self.http_port, self.grpc_port, self.folder))
        self.conf = conf
        self.proc = None

    @property
    def http_url(self):
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self):
        return f"127.0.0.1:{self.grpc_port}"

    def start(self):
        log = self.folder / "error.log"
        self.proc = subprocess.Popen(
            [nginx_bin(), "-p", str(self.folder), "-c", str(self.conf),
             "-g", f"daemon off; pid {self.folder / 'nginx.pid'}; error_log {log} warn;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited with {self.proc.returncode}: {self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.http_port), timeout=0.5).close()
                socket.create_connection(("127.0.0.1", self.grpc_port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"nginx did not listen: {self.log()}")

    def log(self):
        p = self.folder / "error.log"
        return p.read_text(errors="replace")[-3000:] if p.exists() else ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
