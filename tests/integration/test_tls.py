# SPDX-License-Identifier: MIT
"""test_tls.py - semad over TLS (--tls-cert, --tls-key, --tls-client-ca) with certificates
this test makes with the `openssl` command: curl, the `sema` command (libsema-client) and
Python's ssl module as clients; plain HTTP to the TLS port; client certificates (none, from
another CA, good); with --auth, a certificate's CN standing for the token of that name;
certificate reload on SIGHUP; the handshake deadline."""
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import semad_fixture as fx  # noqa: E402


def need(cmd):
    if shutil.which(cmd) is None:
        raise fx.Skip("the %s command is needed (scripts/deps.sh test installs it)" % cmd)


class Certs:
    """A scratch directory of PEM files: a CA, server certificates it signed, client CAs and
    client certificates. Every key is P-256 (fast to make)."""

    def __init__(self):
        need("openssl")
        self.dir = tempfile.mkdtemp(prefix="semad-tls-")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _openssl(self, *args):
        subprocess.run(["openssl"] + list(args), check=True, cwd=self.dir,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)

    def ca(self, name):
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                      "-nodes", "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
                      "-subj", "/CN=" + name)
        return self.path(name + ".pem")

    def issue(self, name, ca, cn, server=True):
        """A certificate `name`.pem (key in `name`.key) with subject CN `cn`, signed by `ca`."""
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            if server:
                f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                      "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + cn)
        self._openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey",
                      ca + ".key", "-CAcreateserial", "-out", name + ".pem", "-days", "2",
                      "-extfile", ext)
        return self.path(name + ".pem"), self.path(name + ".key")

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def client_ctx(certs, cert=None):
    ctx = ssl.create_default_context(cafile=certs.path("ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(certs.path(cert + ".pem"), certs.path(cert + ".key"))
    return ctx


def server_setup():
    c = Certs()
    c.ca("ca")
    c.issue("srv", "ca", "semad-one")
    return c


def client_ca_setup():
    """server_setup(), and a CA for clients that signed worker.pem (CN worker-1), and another
    that signed intruder.pem (the same CN)."""
    c = server_setup()
    c.ca("clients")
    c.issue("worker", "clients", "worker-1", server=False)
    c.ca("other")
    c.issue("intruder", "other", "worker-1", server=False)
    return c


def tls_args(c, name="srv"):
    return ["--tls-cert", c.path(name + ".pem"), "--tls-key", c.path(name + ".key")]


def sema_bin():
    p = os.environ.get("SEMA_BIN")
    return p or os.path.join(fx.source_dir(), "build", "bin", "sema")


def sema(*args, env=None, timeout=30):
    e = dict(os.environ)
    e.pop("SEMA_CACERT", None)
    e.update(env or {})
    return subprocess.run([sema_bin()] + list(args), capture_output=True, text=True,
                          env=e, timeout=timeout * fx.SLOW)


def curl(*args, timeout=30):
    need("curl")
    return subprocess.run(["curl", "-sS", "--max-time", str(int(20 * fx.SLOW))] + list(args),
                          capture_output=True, text=True, timeout=timeout * fx.SLOW)


def closed_by_server(sock, timeout=5):
    sock.settimeout(timeout * fx.SLOW)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


def peer_cn(s):
    """The CN of the certificate semad presents on a new connection."""
    with socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW) as raw:
        with s.tls.wrap_socket(raw, server_hostname="127.0.0.1") as t:
            subj = dict(x[0] for x in t.getpeercert()["subject"])
            return subj["commonName"]


def test_curl_sema_and_python_over_tls():
    c = server_setup()
    try:
        with fx.Semad(*tls_args(c), "--max-name-bytes", "1024", tls=client_ctx(c)) as s:
            url = "https://127.0.0.1:%d" % s.port
            # curl, trusting the test's CA
            r = curl("--cacert", c.path("ca.pem"), "-X", "PUT", "-d", '{"capacity":2}',
                     url + "/v1/semaphores/jobs")
            assert r.returncode == 0 and json.loads(r.stdout)["capacity"] == 2, r
            # curl without the CA: the certificate is not trusted
            r = curl(url + "/healthz")
            assert r.returncode != 0, r
            # the sema command (libsema-client): --cacert, then SEMA_CACERT
            r = sema("acquire", "jobs", "--server", url, "--cacert", c.path("ca.pem"))
            assert r.returncode == 0, r
            lease = r.stdout.strip()
            r = sema("--server", url, "release", lease, env={"SEMA_CACERT": c.path("ca.pem")})
            assert r.returncode == 0, r
            r = sema("--server", url, "run", "jobs", "--", "true",
                     env={"SEMA_CACERT": c.path("ca.pem")})
            assert r.returncode == 0, r
            r = sema("ls", "--server", url)  # no CA given: refused, and says why
            assert r.returncode != 0 and "certificate" in r.stderr, r
            # a reply of many TLS records, and keep-alive requests on one connection
            for i in range(40):
                st, _ = s.json("PUT", "/v1/semaphores/" + "n%03d-" % i + "x" * 500,
                               {"capacity": 1})
                assert st == 201, st
            k = s.conn()
            for _ in range(3):
                st, _, body = fx.do_request(k, "GET", "/v1/semaphores?limit=1000")
                assert st == 200 and len(body) > 16384, (st, len(body))
                assert len(json.loads(body)["semaphores"]) == 41
            k.close()
            assert fx.metric(s, "semad_tls_handshakes_total") >= 5
    finally:
        c.close()


def test_event_stream_over_tls():
    c = server_setup()
    try:
        with fx.Semad(*tls_args(c), tls=client_ctx(c)) as s:
            assert s.json("PUT", "/v1/semaphores/ev", {"capacity": 1})[0] == 201
            raw = socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW)
            t = s.tls.wrap_socket(raw, server_hostname="127.0.0.1")
            t.sendall(b"GET /v1/semaphores/ev/events HTTP/1.1\r\nHost: t\r\n\r\n")
            f = t.makefile("rb")
            assert b"200" in f.readline()
            while f.readline() not in (b"\r\n", b""):
                pass
            assert f.readline().startswith(b": subscribed")
            for _ in range(5):
                st, lease = s.json("POST", "/v1/semaphores/ev/acquire", {})
                assert st == 200
                assert s.json("DELETE", "/v1/leases/" + lease["lease"])[0] in (200, 204)
            seen = []
            while len(seen) < 10:
                line = f.readline()
                assert line, "the stream ended"
                if line.startswith(b"event: "):
                    seen.append(line[7:].strip().decode())
            assert seen[:2] == ["granted", "released"], seen
            t.close()
    finally:
        c.close()


def test_plain_http_to_the_tls_port_is_refused():
    c = server_setup()
    try:
        with fx.Semad(*tls_args(c), tls=client_ctx(c)) as s:
            sock = socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW)
            sock.sendall(fx.raw_request("GET", "/healthz"))
            st, hd, body = fx.read_response(sock.makefile("rb"))
            assert st == 400 and b"https://" in body, (st, body)
            assert hd.get("connection") == "close"
            assert closed_by_server(sock)
            # curl speaking http:// to it gets the same plain-text answer
            r = curl("-i", "http://127.0.0.1:%d/healthz" % s.port)
            assert " 400 " in r.stdout and "https://" in r.stdout, r
            # bytes that are neither TLS nor HTTP: closed without a word
            sock = socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW)
            sock.sendall(b"\x00\x01\x02garbage\r\n\r\n")
            assert closed_by_server(sock)
            assert s.request("GET", "/healthz")[0] == 200  # still serving
            assert fx.metric(s, "semad_tls_plain_http_refused_total") == 2
            assert fx.metric(s, "semad_tls_handshake_failures_total") >= 1
    finally:
        c.close()


def handshake_refused(s, ctx):
    """True when semad refuses the TLS session made with `ctx`: the handshake fails, or
    (TLS 1.3, where the client finishes first) the first request gets no reply."""
    try:
        with socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as t:
                t.sendall(fx.raw_request("GET", "/healthz"))
                return t.recv(100) == b""
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True


def test_client_certificates_required_and_checked():
    c = client_ca_setup()
    try:
        args = tls_args(c) + ["--tls-client-ca", c.path("clients.pem"), "--log-requests"]
        with fx.Semad(*args, tls=client_ctx(c, "worker")) as s:
            url = "https://127.0.0.1:%d" % s.port
            # no certificate
            assert handshake_refused(s, client_ctx(c))
            r = curl("--cacert", c.path("ca.pem"), url + "/healthz")
            assert r.returncode != 0 and '"status"' not in r.stdout, r
            # a certificate from another CA (same CN)
            assert handshake_refused(s, client_ctx(c, "intruder"))
            r = curl("--cacert", c.path("ca.pem"), "--cert", c.path("intruder.pem"), "--key",
                     c.path("intruder.key"), url + "/healthz")
            assert r.returncode != 0 and '"status"' not in r.stdout, r
            # the good one, with curl, Python and sema
            r = curl("--cacert", c.path("ca.pem"), "--cert", c.path("worker.pem"), "--key",
                     c.path("worker.key"), url + "/healthz")
            assert r.returncode == 0 and json.loads(r.stdout)["status"] == "ok", r
            assert s.json("PUT", "/v1/semaphores/cc", {"capacity": 1})[0] == 201
            r = sema("create", "cc2", "1", "--server", url, "--cacert", c.path("ca.pem"),
                     "--cert", c.path("worker.pem"), env={"SEMA_CERT_KEY": c.path("worker.key")})
            assert r.returncode == 0, r
            r = sema("create", "cc3", "1", "--server", url, "--cacert", c.path("ca.pem"))
            assert r.returncode != 0, r
            # the verified subject CN is the connection's client name
            fx.wait_until(lambda: any("PUT /v1/semaphores/cc -> 201 client=worker-1" in l
                                      for l in s.log()), what="the request's log line")
            assert fx.metric(s, "semad_tls_handshake_failures_total") >= 4
    finally:
        c.close()


def test_sema_says_what_tls_wants():
    # each TLS mistake of a newcomer gets its own words and a way out: never "cannot reach
    # ... is semad running?" (exit 69) for a server that answered the handshake
    c = client_ca_setup()
    try:
        args = tls_args(c) + ["--tls-client-ca", c.path("clients.pem")]
        with fx.Semad(*args, tls=client_ctx(c, "worker")) as s:
            url = "https://localhost:%d" % s.semad_port
            ca, cert, key = c.path("ca.pem"), c.path("worker.pem"), c.path("worker.key")
            r = sema("ls", "--server", url)  # semad's CA not given
            assert r.returncode == 1 and "is not trusted" in r.stderr, r
            assert "--cacert FILE (or SEMA_CACERT)" in r.stderr, r.stderr
            r = sema("ls", "--server", url, "--cacert", ca)  # no client certificate
            assert r.returncode == 1, r
            assert "asked for a client certificate and none was given" in r.stderr, r.stderr
            assert "--cert FILE" in r.stderr and "is semad running" not in r.stderr, r.stderr
            r = sema("ls", "--server", url, "--cacert", ca, "--cert", cert)  # its key elsewhere
            assert r.returncode == 2 and "holds no private key" in r.stderr, r  # before connecting
            assert "--cert-key FILE" in r.stderr, r.stderr
            # curl's spelling: --key is sema's idempotency key, and says so
            for verb in (["acquire", "x"], ["ls"]):
                r = sema(*verb, "--server", url, "--cacert", ca, "--cert", cert, "--key", key)
                assert r.returncode == 2 and "--cert-key" in r.stderr, (verb, r)
            r = sema("ls", "--server", url, "--cacert", ca, "--cert", c.path("intruder.pem"),
                     "--cert-key", c.path("intruder.key"))
            assert r.returncode == 1 and "refused the client certificate" in r.stderr, r
            # right: --cert-key, before or after the verb, or SEMA_CERT_KEY
            for a in (["ls", "--server", url, "--cacert", ca, "--cert", cert, "--cert-key", key],
                      ["--cert-key", key, "--cert", cert, "--cacert", ca, "-s", url, "ls"]):
                r = sema(*a)
                assert r.returncode == 0 and r.stdout.startswith("NAME"), (a, r)
            r = sema("ls", "--server", url, "--cacert", ca, env={"SEMA_CERT": cert,
                                                                  "SEMA_CERT_KEY": key})
            assert r.returncode == 0, r
    finally:
        c.close()


def token_new(path, name, rights, *prefixes):
    """`sema token new` into the token file at `path`; the printed token."""
    args = ["token", "new", name, "--rights", rights, "--file", path]
    for p in prefixes:
        args += ["--prefix", p]
    r = sema(*args)
    assert r.returncode == 0, r
    return r.stdout.strip()


def test_client_certificate_names_a_token():
    c = server_setup()
    try:
        c.ca("clients")
        c.issue("runner", "clients", "ci-runner", server=False)
        c.issue("boss", "clients", "ops", server=False)
        c.issue("stranger", "clients", "nobody", server=False)
        tokens = c.path("tokens")
        token_new(tokens, "ops", "admin")
        token_new(tokens, "ci-runner", "acquire", "jobs/")
        w2 = token_new(tokens, "w2", "acquire")
        args = tls_args(c) + ["--tls-client-ca", c.path("clients.pem"), "--auth", tokens]
        with fx.Semad(*args, tls=client_ctx(c, "boss")) as s:
            def conn(cert):
                return http.client.HTTPSConnection(s.host, s.semad_port, timeout=30 * fx.SLOW,
                                                   context=client_ctx(c, cert))

            def call(cn, method, path, body=None, headers=None):
                st, hd, data = fx.do_request(cn, method, path, body, headers)
                return st, (json.loads(data) if data else None)

            # the CN "ops" is the admin token: no Authorization header needed
            assert s.json("PUT", "/v1/semaphores/jobs%2Fa", {"capacity": 1})[0] == 201
            assert s.json("PUT", "/v1/semaphores/other", {"capacity": 1})[0] == 201
            # the CN "ci-runner": its rights and prefixes, on one keep-alive connection
            runner = conn("runner")
            st, lease = call(runner, "POST", "/v1/semaphores/jobs%2Fa/acquire",
                             {"timeout_ms": 0, "ttl_ms": 60000})
            assert st == 200 and lease["name"] == "jobs/a", lease
            st, p = call(runner, "PUT", "/v1/semaphores/jobs%2Fb", {"capacity": 1})
            assert st == 403 and "token 'ci-runner' lacks the 'admin' right" in p["detail"], p
            st, p = call(runner, "POST", "/v1/semaphores/other/acquire", {"timeout_ms": 0})
            assert st == 403 and "'jobs/'" in p["detail"], p
            st, p = call(runner, "GET", "/v1/semaphores/jobs%2Fa")
            assert st == 403 and "'read' right" in p["detail"], p
            # the lease is ci-runner's: another token cannot end it, its certificate can
            stranger = conn("stranger")
            st, p = call(stranger, "DELETE", "/v1/leases/" + lease["lease"], None,
                         {"Authorization": "Bearer " + w2})
            assert st == 403 and "another token" in p["detail"], p
            # a CN that names no token: 401 that says so
            st, p = call(stranger, "GET", "/v1/semaphores")
            assert st == 401 and "'nobody'" in p["detail"], p
            # a header wins over the certificate: a bad one is a 401, a good one is its token
            st, p = call(runner, "GET", "/v1/semaphores", None,
                         {"Authorization": "Bearer sema_nosuchtoken"})
            assert st == 401, p
            st, p = call(runner, "POST", "/v1/semaphores/other/acquire", {"timeout_ms": 0},
                         {"Authorization": "Bearer " + w2})
            assert st == 200, p
            assert call(runner, "DELETE", "/v1/leases/" + lease["lease"])[0] == 204
            # curl with the certificate alone
            r = curl("--cacert", c.path("ca.pem"), "--cert", c.path("runner.pem"), "--key",
                     c.path("runner.key"), "-XPOST", "-d", '{"timeout_ms":0}',
                     "https://127.0.0.1:%d/v1/semaphores/jobs%%2Fa/acquire" % s.semad_port)
            assert r.returncode == 0 and json.loads(r.stdout)["name"] == "jobs/a", r
            assert call(runner, "DELETE", "/v1/leases/" + json.loads(r.stdout)["lease"])[0] == 204
            # the sema command (libsema-client) with the certificate and no SEMA_TOKEN
            url = "https://127.0.0.1:%d" % s.semad_port
            r = sema("run", "jobs/a", "--server", url, "--cacert", c.path("ca.pem"), "--cert",
                     c.path("runner.pem"), "--", "true",
                     env={"SEMA_CERT_KEY": c.path("runner.key"), "SEMA_TOKEN": ""})
            assert r.returncode == 0, r
            r = sema("create", "jobs/c", "1", "--server", url, "--cacert", c.path("ca.pem"),
                     "--cert", c.path("runner.pem"),
                     env={"SEMA_CERT_KEY": c.path("runner.key"), "SEMA_TOKEN": ""})
            assert r.returncode != 0 and "admin" in r.stdout + r.stderr, r
            # the token's line removed and SIGHUP: the same connection's next request is 401
            with open(tokens) as f:
                lines = [ln for ln in f if not ln.startswith("ci-runner ")]
            with open(tokens, "w") as f:
                f.writelines(lines)
            s.proc.send_signal(signal.SIGHUP)
            fx.wait_until(lambda: any("SIGHUP: 2 tokens loaded" in ln for ln in s.log()), 10,
                          "the reload")
            st, p = call(runner, "POST", "/v1/semaphores/jobs%2Fa/acquire", {"timeout_ms": 0})
            assert st == 401 and "'ci-runner'" in p["detail"], p
            runner.close()
            stranger.close()
    finally:
        c.close()


def test_sighup_reloads_the_certificate_for_new_connections():
    c = server_setup()
    try:
        c.issue("srv2", "ca", "semad-two")
        live = c.path("live")
        os.makedirs(live)
        for ext in ("pem", "key"):
            shutil.copy(c.path("srv." + ext), os.path.join(live, "cert." + ext))
        args = ["--tls-cert", os.path.join(live, "cert.pem"), "--tls-key",
                os.path.join(live, "cert.key")]
        with fx.Semad(*args, tls=client_ctx(c)) as s:
            assert peer_cn(s) == "semad-one"
            old = s.conn()
            assert fx.do_request(old, "GET", "/healthz")[0] == 200
            for ext in ("pem", "key"):
                shutil.copy(c.path("srv2." + ext), os.path.join(live, "cert." + ext))
            s.proc.send_signal(signal.SIGHUP)
            fx.wait_until(lambda: any("TLS certificate reloaded" in l for l in s.log()),
                          what="the reload")
            assert peer_cn(s) == "semad-two"
            # the connection made before keeps its session and is served
            assert fx.do_request(old, "GET", "/healthz")[0] == 200
            assert dict(x[0] for x in old.sock.getpeercert()["subject"])["commonName"] == \
                "semad-one"
            old.close()
            # a broken file: the current certificate stays, and the log says why
            with open(os.path.join(live, "cert.pem"), "w") as f:
                f.write("not a certificate\n")
            s.proc.send_signal(signal.SIGHUP)
            fx.wait_until(lambda: any("keeping the current TLS certificate" in l
                                      for l in s.log()), what="the failed reload")
            assert peer_cn(s) == "semad-two"
            assert s.request("GET", "/healthz")[0] == 200
    finally:
        c.close()


def test_handshake_has_a_deadline():
    c = server_setup()
    try:
        with fx.Semad(*tls_args(c), "--header-timeout", "500ms", tls=client_ctx(c)) as s:
            silent = socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW)
            # a ClientHello that never ends: a record header promising 200 bytes, then 1
            slow = socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW)
            slow.sendall(b"\x16\x03\x01\x00\xc8\x01")
            t0 = time.monotonic()
            assert s.request("GET", "/healthz")[0] == 200  # others are served meanwhile
            assert closed_by_server(silent) and closed_by_server(slow)
            assert time.monotonic() - t0 < 5 * fx.SLOW
            assert fx.metric(s, "semad_tls_handshake_failures_total") == 2
    finally:
        c.close()


def test_tls_versions_and_ciphers():
    """TLS 1.3 by default; TLS 1.2 only with forward-secret AEAD suites; older refused."""
    c = server_setup()
    try:
        with fx.Semad(*tls_args(c), tls=client_ctx(c)) as s:
            with socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW) as raw:
                with s.tls.wrap_socket(raw, server_hostname="127.0.0.1") as t:
                    assert t.version() == "TLSv1.3", t.version()
            ctx12 = client_ctx(c)
            ctx12.maximum_version = ssl.TLSVersion.TLSv1_2
            with socket.create_connection((s.host, s.port), timeout=10 * fx.SLOW) as raw:
                with ctx12.wrap_socket(raw, server_hostname="127.0.0.1") as t:
                    name, version, _ = t.cipher()
                    assert version == "TLSv1.2" and name.startswith("ECDHE-"), t.cipher()
                    assert "GCM" in name or "CHACHA20" in name, name
            # a TLS 1.2 client offering only CBC suites finds nothing in common
            cbc = client_ctx(c)
            cbc.maximum_version = ssl.TLSVersion.TLSv1_2
            cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES128-SHA")
            assert handshake_refused(s, cbc)
            # TLS 1.1 (openssl s_client, which can still offer it): the server says no
            need("openssl")
            r = subprocess.run(["openssl", "s_client", "-tls1_1", "-cipher", "ALL:@SECLEVEL=0",
                                "-connect", "127.0.0.1:%d" % s.port],
                               input="", capture_output=True, text=True, timeout=30 * fx.SLOW)
            assert "Cipher is (NONE)" in r.stdout and "protocol version" in r.stderr, r
            assert s.request("GET", "/healthz")[0] == 200
    finally:
        c.close()


def test_connection_over_the_per_address_cap_is_closed_before_any_handshake():
    c = server_setup()
    try:
        with fx.Semad(*tls_args(c), "--max-connections-per-ip", "1", tls=client_ctx(c)) as s:
            fx.wait_until(lambda: alone(s), what="the health check's connection to close")
            held = s.conn()
            assert fx.do_request(held, "GET", "/healthz")[0] == 200
            assert handshake_refused(s, client_ctx(c))
            assert metric_via(s, held, "semad_http_connections_rejected_per_ip_total") == 1
            assert metric_via(s, held, "semad_tls_handshake_failures_total") == 0
            held.close()
    finally:
        c.close()


def alone(s):
    """True when a new connection gets in and is the only one open."""
    try:
        return metric_via(s, None, "semad_http_connections") == 1
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return False


def metric_via(s, conn, name):
    """A metric read on `conn` (a keep-alive connection), or on a new one when None."""
    k = conn or s.conn()
    try:
        st, _, body = fx.do_request(k, "GET", "/metrics")
    finally:
        if conn is None:
            k.close()
    assert st == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError("no metric " + name)


def test_bad_tls_flags_are_refused_at_start():
    c = server_setup()
    try:
        exe = fx.semad_path()
        cases = [
            (["--tls-cert", c.path("srv.pem")], "--tls-key"),
            (["--tls-client-ca", c.path("ca.pem")], "--tls-cert"),
            (["--tls-cert", c.path("nope.pem"), "--tls-key", c.path("srv.key")], "nope.pem"),
            (["--tls-cert", c.path("srv.pem"), "--tls-key", c.path("ca.key")], "key"),
        ]
        for args, word in cases:
            r = subprocess.run([exe, "--listen", "127.0.0.1:0", "--durability", "none"] + args,
                               capture_output=True, text=True, timeout=30 * fx.SLOW)
            assert r.returncode != 0 and word in r.stderr, (args, r)
    finally:
        c.close()


if __name__ == "__main__":
    fx.main(globals())
