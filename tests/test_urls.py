"""Every command reads URLs (profanalyzer.read.sources), tested against a real
local GCS emulator (the `gcp-storage-emulator` package, in-memory, on
127.0.0.1, started and stopped here) through the real gcsfs client
(STORAGE_EMULATOR_HOST). Between gcsfs and the emulator sits a small
loopback HTTP relay that forwards every request unchanged, counts the object
bytes served, and answers 403 (GCS's JSON error) for the bucket `locked`:
the emulator has no access control, a real bucket without access does this.

Also: `file://` URLs (fsspec's local file system), and the range-read
fetch of an uncompressed host file (large non-device planes stubbed)."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import SAMPLES, run_cli, sample_path

pytest.importorskip("fsspec", reason="URLs need fsspec (the [gcs] extra)")

RUN_OLD = "2024_01_02_03_04_05"
RUN_NEW = "2024_12_19_09_49_25"


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class _Relay(BaseHTTPRequestHandler):
    """Forward to the emulator; 403 for bucket `locked`; count media bytes."""

    upstream: tuple[str, int] = ("127.0.0.1", 0)
    media_bytes = 0
    lock = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def _relay(self):
        if "/b/locked" in self.path or "/locked/" in self.path:
            body = json.dumps({"error": {"code": 403, "message": "anonymous caller does not have storage.objects.get access to the Google Cloud Storage object.",
                                         "errors": [{"reason": "forbidden"}]}}).encode()
            self.send_response(403)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n) if n else None
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "transfer-encoding")}
        conn.request(self.command, self.path, body=data, headers=headers)
        r = conn.getresponse()
        payload = r.read()
        if "alt=media" in self.path:
            with _Relay.lock:
                _Relay.media_bytes += len(payload)
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading (a ranged read-ahead)
            pass
        conn.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _relay


@pytest.fixture(scope="module")
def gcs():
    """A running emulator behind the relay; yields (gcsfs filesystem, relay)."""
    pytest.importorskip("gcp_storage_emulator", reason="the GCS emulator (gcp-storage-emulator) is in the [test] extra")
    from gcp_storage_emulator.server import create_server

    saved = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")}
    port = _free_port()
    server = create_server("127.0.0.1", port, in_memory=True)
    server.start()
    _Relay.upstream = ("127.0.0.1", port)
    relay = ThreadingHTTPServer(("127.0.0.1", 0), _Relay)
    t = threading.Thread(target=relay.serve_forever, daemon=True)
    t.start()
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{relay.server_address[1]}"
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    try:
        gcsfs = pytest.importorskip("gcsfs", reason="gs:// needs gcsfs (the [gcs] extra)")
        fs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True, timeout=20)
        fs.mkdir("bkt")
        # A log dir with two runs of two hosts each; the newer is the sample's.
        new = SAMPLES / "dense_short_fsdp_2hosts" / "plugins" / "profile" / RUN_NEW
        for f in sorted(new.iterdir()):
            fs.put(str(f), f"bkt/logs/plugins/profile/{RUN_NEW}/{f.name}")
        for f in sorted(new.iterdir()):  # the older run: other bytes (the single-host sample, twice)
            fs.put(str(sample_path("offload_off")), f"bkt/logs/plugins/profile/{RUN_OLD}/{f.name}")
        fs.put(str(sample_path("dense_short_fsdp")), "bkt/one/dense_short_fsdp.xplane.pb.gz")
        yield fs, _Relay
    finally:
        relay.shutdown()
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _fresh():
    """Each command opens its own gcsfs instance (no listing cached from the uploads)."""
    import gcsfs

    gcsfs.GCSFileSystem.clear_instance_cache()


def _json(capsys, *args):
    _fresh()
    rc, out, err = run_cli(capsys, *args, "--json", "-")
    assert rc == 0, err
    return json.loads(out)


def test_analyze_log_dir_picks_the_newest_run_and_matches_local(gcs, capsys):
    remote = _json(capsys, "analyze", "gs://bkt/logs/", "--no-html", "-q")
    local = _json(capsys, "analyze", SAMPLES / "dense_short_fsdp_2hosts", "--no-html", "-q")
    assert remote["run"] == RUN_NEW and remote["input_kind"] == "logdir"
    assert remote["source"] == "gs://bkt/logs/"
    assert len(remote["hosts"]) == 2
    for k in ("breakdown", "steps", "per_host", "top_ops", "recommendations"):
        assert remote[k] == local[k], k


def test_info_compare_check_read_gs(gcs, capsys, tmp_path):
    _fresh()
    rc, out, err = run_cli(capsys, "info", "gs://bkt/logs")
    assert rc == 0, err
    assert out.startswith("trace: gs://bkt/logs (logdir, run 2024_12_19_09_49_25)")
    assert "hosts: 2" in out
    _fresh()
    c = _json(capsys, "compare", "gs://bkt/one/dense_short_fsdp.xplane.pb.gz", sample_path("dense_short_fsdp"), "-q")
    assert c["step_time"]["delta_ps"] == 0
    budget = tmp_path / "b.toml"
    budget.write_text("[budget]\nmfu = { min = 0.0 }\n")
    _fresh()
    rc, out, err = run_cli(capsys, "check", "gs://bkt/one/dense_short_fsdp.xplane.pb.gz", "--budget", budget)
    assert rc == 0, err
    assert "all 1 checks passed" in out
    # A budget file's baseline may be a URL (not taken relative to the file).
    budget.write_text('baseline = "gs://bkt/one/dense_short_fsdp.xplane.pb.gz"\n[max_regression]\nstep_time = "1%"\n')
    _fresh()
    rc, out, err = run_cli(capsys, "check", sample_path("dense_short_fsdp"), "--budget", budget)
    assert rc == 0, err
    assert "all 1 checks passed" in out and "vs baseline" in out


def test_missing_object_is_one_line_exit_2(gcs, capsys):
    for url in ("gs://bkt/one/nope.xplane.pb.gz", "gs://bkt/nothing-here/"):
        _fresh()
        rc, out, err = run_cli(capsys, "analyze", url, "--no-html", "-q")
        assert rc == 2
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"profanalyze: error: {url}") and "no such file" in lines[0]


def test_permission_denied_is_one_line_exit_2(gcs, capsys):
    for cmd in (("analyze", "gs://locked/run/h.xplane.pb.gz", "--no-html", "-q"), ("info", "gs://locked/logs/"),
                ("compare", "gs://locked/a.json", "gs://bkt/one/dense_short_fsdp.xplane.pb.gz")):
        _fresh()
        rc, out, err = run_cli(capsys, *cmd)
        assert rc == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "gs://locked/" in lines[0] and "permission denied" in lines[0], err


def _with_big_host_plane(src: Path, size: int) -> bytes:
    """The sample's XSpace with a `/host:metadata` plane of `size` bytes
    appended (an unknown length-delimited field as its bulk)."""
    def uvarint(v: int) -> bytes:
        out = bytearray()
        while True:
            b, v = v & 0x7F, v >> 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    def field(n: int, body: bytes) -> bytes:
        return uvarint(n << 3 | 2) + uvarint(len(body)) + body

    plane = uvarint(1 << 3) + uvarint(99) + field(2, b"/host:metadata") + field(15, b"\0" * size)
    return gzip.decompress(src.read_bytes()) + field(1, plane)


def test_uncompressed_host_file_is_fetched_by_ranges(gcs, capsys, tmp_path):
    fs, relay = gcs
    raw = _with_big_host_plane(sample_path("dense_short_fsdp"), 8 << 20)
    local = tmp_path / "h0.xplane.pb"
    local.write_bytes(raw)
    fs.pipe("bkt/raw/h0.xplane.pb", raw)
    relay.media_bytes = 0
    remote = _json(capsys, "analyze", "gs://bkt/raw/h0.xplane.pb", "--no-html", "-q")
    fetched = relay.media_bytes
    here = _json(capsys, "analyze", local, "--no-html", "-q")
    assert remote["breakdown"] == here["breakdown"] and remote["top_ops"] == here["top_ops"]
    assert remote["recommendations"] == here["recommendations"]
    # The 8 MiB host plane stayed in the store: fetched is the device planes plus read-ahead blocks.
    assert fetched < len(raw) - (7 << 20), (fetched, len(raw))
    # info asks for everything: the plane is counted as it is in the file.
    _fresh()
    rc, out, err = run_cli(capsys, "info", "gs://bkt/raw/h0.xplane.pb")
    assert rc == 0, err


def test_file_urls(capsys, tmp_path):
    url = sample_path("dense_short_fsdp").resolve().as_uri()
    rc, out, err = run_cli(capsys, "analyze", url, "--no-html", "-q", "--json", "-")
    assert rc == 0, err
    d = json.loads(out)
    assert d["source"] == url
    rc, out, err = run_cli(capsys, "analyze", sample_path("dense_short_fsdp"), "--no-html", "-q", "--json", "-")
    assert json.loads(out)["breakdown"] == d["breakdown"]
    run = (SAMPLES / "dense_short_fsdp_2hosts").resolve().as_uri()
    rc, out, err = run_cli(capsys, "info", run)
    assert rc == 0 and "hosts: 2" in out
    missing = (tmp_path / "gone.xplane.pb").as_uri()
    rc, out, err = run_cli(capsys, "analyze", missing, "-q", "--no-html")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and missing in err
