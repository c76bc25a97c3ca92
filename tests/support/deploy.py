"""A production-like deployment for tests: `orgunit-fhir serve --workers N` as a process, and a real nginx
(the Debian package) terminating TLS in front of it, configured as docs/deployment.md says."""
from __future__ import annotations

import datetime
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.live import CLI, _env, free_port, own
from tests.support.waiting import eventually

PUBLIC_HOST = "registry.example.org"


@dataclass(frozen=True)
class Served:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def get_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@contextmanager
def serve(tmp: Path, database: str, settings_text: str, workers: int = 2) -> Iterator[Served]:
    """Started and ready: every worker's application started (one answering /readyz 200 says nothing of the
    others: a metric summed over the workers read then missed one), and /readyz 200; stopped at the end if the test
    has not stopped it."""
    settings = tmp / "settings.yaml"
    settings.write_text(f"server:\n  data_dir: {tmp / 'var'}\n{settings_text}", encoding="utf-8")
    port = free_port()
    log = tmp / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([*CLI, "serve", "--settings", str(settings), "--database", database, "--no-demo",
                                 "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)],
                                stdout=out, stderr=subprocess.STDOUT, env=_env())
    served = Served(proc, port, log)
    try:
        deadline = time.monotonic() + 120
        while get_status(f"{served.origin}/readyz") != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not become ready:\n{log.read_text()}")
            time.sleep(0.2)
        own(proc, log, port)
        logged(log, lambda text: text.count("Application startup complete.") >= workers, within=120)
        yield served
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def logged(path: Path, holds: Callable[[str], bool], within: float = 30) -> str:
    """The whole lines of a log another process writes, once they hold what the test looks for: nginx writes a
    request's access line after the answer is sent, a worker its log line after it answered, so the client can be
    first (under load, by much)."""
    def lines() -> str:
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[:text.rfind("\n") + 1]  # a line being written is not read yet

    return eventually(lambda: (found if holds(found := lines()) else None),
                      lambda: f"{path.name} never logged what was looked for:\n{lines()[-3000:]}", within)


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found is None:
        pytest.fail("nginx is not installed: `make nginx` installs the Debian package (apt-get install nginx), "
                    "which this deployment test runs in front of the server")
    return found


def self_signed(tmp: Path, host: str = PUBLIC_HOST) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "tls.crt", tmp / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def nginx_config(tmp: Path, listen_port: int, upstream_port: int, cert: Path, key: Path) -> str:
    """The server block of docs/deployment.md, with every file nginx writes kept in `tmp`."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must reach `tmp`, which only its owner may enter
    temp = "\n".join(f"    {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    return f"""{user}daemon off;
worker_processes 1;
pid {tmp / 'nginx.pid'};
error_log {tmp / 'nginx-error.log'} info;
events {{ worker_connections 256; }}
http {{
{temp}
    log_format main '$remote_addr "$request" $status $body_bytes_sent $request_time id=$orgunit_request_id';
    access_log {tmp / 'nginx-access.log'} main;

    upstream orgunit_fhir {{
        server 127.0.0.1:{upstream_port};
        keepalive 16;
    }}
    map $http_x_request_id $orgunit_request_id {{
        "~^[A-Za-z0-9._:-]{{1,128}}$" $http_x_request_id;
        default                     $request_id;
    }}

    gzip on;
    gzip_proxied any;
    gzip_vary on;
    gzip_min_length 1024;
    gzip_types application/fhir+json application/json application/fhir+xml application/xml text/xml;

    server {{
        listen 127.0.0.1:{listen_port} ssl;
        server_name {PUBLIC_HOST};
        ssl_certificate {cert};
        ssl_certificate_key {key};

        location = /metrics {{ deny all; }}

        location / {{
            proxy_pass http://orgunit_fhir;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Forwarded-Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Request-ID $orgunit_request_id;
            proxy_read_timeout 60s;
        }}
    }}
}}
"""


@contextmanager
def nginx(tmp: Path, upstream_port: int) -> Iterator[int]:
    """A TLS nginx on a free loopback port in front of 127.0.0.1:upstream_port; yields its port."""
    binary = nginx_binary()
    cert, key = self_signed(tmp)
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(nginx_config(tmp, port, upstream_port, cert, key), encoding="utf-8")
    log = tmp / "nginx.out"
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "-p", str(tmp), "-e", str(tmp / "nginx-error.log"), "-c", str(conf)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    errors = (tmp / "nginx-error.log").read_text() if (tmp / "nginx-error.log").exists() else ""
                    raise AssertionError(f"nginx did not start:\n{log.read_text()}\n{errors}") from None
                time.sleep(0.1)
        yield port
    finally:
        proc.send_signal(signal.SIGQUIT)  # graceful: finish what it serves
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
