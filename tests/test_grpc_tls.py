"""gRPC over TLS with Triton's flags (issue 16, point 2): `--grpc-use-ssl`, `--grpc-use-ssl-mutual`,
`--grpc-server-cert`, `--grpc-server-key`, `--grpc-root-cert`, tried with tritonclient.grpc
(`ssl=True`) and certificates made at test time with the openssl command-line tool: a CA, a
server certificate for 127.0.0.1 signed by it, a client certificate signed by it, and a second,
unrelated CA with its own client certificate. HTTP stays plaintext, as in Triton.
"""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from helpers import free_ports, run_to_exit


def openssl(*args, cwd):
    tool = shutil.which("openssl")
    assert tool, "the openssl command-line tool is needed to make the test certificates"
    subprocess.run([tool, *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=d)


def make_leaf(d: Path, name: str, ca: str, ext: str):
    (d / f"{name}.ext").write_text(ext)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    make_ca(d, "ca")
    make_ca(d, "rogue_ca")
    leaf = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    make_leaf(d, "server", "ca", leaf + "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    make_leaf(d, "client", "ca", leaf + "extendedKeyUsage=clientAuth\n")
    make_leaf(d, "rogue_client", "rogue_ca", leaf + "extendedKeyUsage=clientAuth\n")
    return d


def read(d: Path, name: str) -> bytes:
    return (d / name).read_bytes()


def add_sub_ok(client, headers=None):
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    ins = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(a * 2)
    res = client.infer("add_sub", ins, headers=headers, client_timeout=30)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a * 3)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), -a)


def refused(client):
    """The client cannot make a call: the handshake (or the plaintext preface) fails."""
    with pytest.raises(InferenceServerException) as e:
        client.is_server_live(client_timeout=10)
    assert e.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED"), e.value
    return e.value


def tls_args(certs, mutual=False):
    args = [f"--grpc-server-cert={certs / 'server.pem'}", f"--grpc-server-key={certs / 'server.key'}"]
    if mutual:
        return args + ["--grpc-use-ssl-mutual=true", f"--grpc-root-cert={certs / 'ca.pem'}"]
    return args + ["--grpc-use-ssl=true"]


def test_tls_serves_clients_that_trust_the_ca(start_server, repo_copy, certs):
    srv = start_server(repo_copy(["add_sub"]), args=tls_args(certs))
    assert "GRPCInferenceService at 127.0.0.1:" in srv.log_tail() and "(TLS)" in srv.log_tail()
    c = grpcclient.InferenceServerClient(srv.grpc_url, ssl=True, root_certificates=str(certs / "ca.pem"))
    try:
        assert c.is_server_live() and c.is_server_ready()
        assert c.get_server_metadata().name == "triton"
        add_sub_ok(c)
        # A stream over TLS too.
        results = []
        c.start_stream(callback=lambda result, error: results.append((result, error)))
        a = np.ones((1, 16), dtype=np.float32)
        ins = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(a)
        for _ in range(3):
            c.async_stream_infer("add_sub", ins)
        c.stop_stream()
        assert [e for _, e in results] == [None] * 3, results
    finally:
        c.close()
    # Plaintext, or a client that trusts another CA, gets no answer.
    plain = grpcclient.InferenceServerClient(srv.grpc_url)
    refused(plain)
    plain.close()
    other = grpcclient.InferenceServerClient(srv.grpc_url, ssl=True, root_certificates=str(certs / "rogue_ca.pem"))
    refused(other)
    other.close()
    # HTTP stays plaintext, as Triton's.
    assert requests.get(srv.base + "/v2/health/ready", timeout=10).status_code == 200
    assert srv.alive()


def test_mutual_tls_needs_a_client_certificate_from_the_root(start_server, repo_copy, certs):
    srv = start_server(repo_copy(["add_sub"]), args=tls_args(certs, mutual=True))
    ca = str(certs / "ca.pem")
    good = grpcclient.InferenceServerClient(srv.grpc_url, ssl=True, root_certificates=ca,
                                            private_key=str(certs / "client.key"),
                                            certificate_chain=str(certs / "client.pem"))
    try:
        assert good.is_server_ready()
        add_sub_ok(good)
    finally:
        good.close()
    for kw in [{},  # TLS without a client certificate
               {"private_key": str(certs / "rogue_client.key"),
                "certificate_chain": str(certs / "rogue_client.pem")}]:
        c = grpcclient.InferenceServerClient(srv.grpc_url, ssl=True, root_certificates=ca, **kw)
        refused(c)
        c.close()
    plain = grpcclient.InferenceServerClient(srv.grpc_url)
    refused(plain)
    plain.close()
    # The refused handshakes did not hurt the server.
    again = grpcclient.InferenceServerClient(srv.grpc_url, ssl=True, root_certificates=ca,
                                             private_key=str(certs / "client.key"),
                                             certificate_chain=str(certs / "client.pem"))
    try:
        add_sub_ok(again)
    finally:
        again.close()


def test_tls_and_restrictions_together(start_server, repo_copy, certs):
    srv = start_server(repo_copy(["add_sub"]),
                       args=tls_args(certs) + ["--grpc-restricted-protocol=inference:token=t0"])
    c = grpcclient.InferenceServerClient(srv.grpc_url, ssl=True, root_certificates=str(certs / "ca.pem"))
    try:
        with pytest.raises(InferenceServerException) as e:
            add_sub_ok(c)
        assert e.value.status() == "StatusCode.UNAVAILABLE"
        add_sub_ok(c, headers={"triton-grpc-protocol-token": "t0"})
    finally:
        c.close()


@pytest.mark.parametrize("case", ["no key", "not pem", "key of another cert", "mutual without root", "missing file"])
def test_bad_tls_files_refuse_to_start(tmp_path, certs, case):
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    server = [f"--grpc-server-cert={certs / 'server.pem'}"]
    args, want = {
        "no key": (["--grpc-use-ssl=true", *server], "--grpc-use-ssl=true needs --grpc-server-key"),
        "not pem": (["--grpc-use-ssl=true", f"--grpc-server-cert={junk}", f"--grpc-server-key={junk}"],
                    "the gRPC TLS certificate or key cannot be used"),
        "key of another cert": (["--grpc-use-ssl=true", *server, f"--grpc-server-key={certs / 'client.key'}"],
                                "the gRPC TLS certificate or key cannot be used"),
        "mutual without root": (["--grpc-use-ssl-mutual=true", *server, f"--grpc-server-key={certs / 'server.key'}"],
                                "--grpc-use-ssl-mutual=true needs --grpc-root-cert"),
        "missing file": (["--grpc-use-ssl=true", *server, f"--grpc-server-key={tmp_path / 'nope.key'}"],
                         "cannot read --grpc-server-key"),
    }[case]
    http, grpc_port, metrics = free_ports(3)
    code, out = run_to_exit(["--model-repository", str(tmp_path), f"--http-port={http}",
                             f"--grpc-port={grpc_port}", f"--metrics-port={metrics}", *args])
    assert code != 0 and want in out, out
    assert "started GRPCInferenceService" not in out, out


def test_certificates_without_tls_are_noted_and_plaintext_is_served(start_server, repo_copy, certs):
    srv = start_server(repo_copy(["add_sub"]), args=[f"--grpc-server-cert={certs / 'server.pem'}"])
    assert "--grpc-server-cert has no effect" in srv.log_tail()
    c = grpcclient.InferenceServerClient(srv.grpc_url)
    try:
        add_sub_ok(c)
    finally:
        c.close()
