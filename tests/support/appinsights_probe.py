"""Run ``shared.app.telemetry.configure`` as Azure does (the Azure Monitor distro, Entra-authenticated)
against a local stand-in of the Application Insights ingestion endpoint, log one record per logger named
on the command line, and print, as JSON, the messages the endpoint received.

Stand-ins, because nothing of Azure runs here: the ingestion endpoint is a TLS server on loopback (the
exporter refuses bearer tokens over plain HTTP) with a certificate made for this run, and the credential
returns a fixed token (there is no Entra ID to ask). The exporter, its log handler and the HTTP path are the
real ones. Usage: python -m tests.support.appinsights_probe CERT_DIR LOGGER:LEVEL:MESSAGE ...
"""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import json
import logging
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

received: list[str] = []


class _Ingestion(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        envelopes = json.loads(body)
        for envelope in envelopes:
            if envelope.get("data", {}).get("baseType") == "MessageData":
                received.append(envelope["data"]["baseData"]["message"])
        out = json.dumps({"itemsReceived": len(envelopes), "itemsAccepted": len(envelopes), "errors": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: object) -> None:
        return


def _certificate(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


class _FixedToken:
    def get_token(self, *scopes: str, **kwargs: object) -> object:
        from azure.core.credentials import AccessToken

        return AccessToken("probe-token", 4102444800)


def main(argv: list[str]) -> None:
    cert, key = _certificate(Path(argv[0]))
    os.environ["REQUESTS_CA_BUNDLE"] = str(cert)  # the SDK's transport trusts this run's certificate
    os.environ["APPLICATIONINSIGHTS_STATSBEAT_DISABLED_ALL"] = "true"  # statsbeat goes to a fixed Azure host
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ingestion)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    import azure.identity

    azure.identity.DefaultAzureCredential = _FixedToken  # type: ignore[misc,assignment]
    from opentelemetry._logs import get_logger_provider

    from shared.app import telemetry

    endpoint = f"https://localhost:{server.server_address[1]}/"
    kind = telemetry.configure(f"InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint={endpoint}")
    for spec in argv[1:]:
        name, level, message = spec.split(":", 2)
        logging.getLogger(name).log(getattr(logging, level), message)
    get_logger_provider().force_flush()  # type: ignore[attr-defined]
    server.shutdown()
    print(json.dumps({"exporter": kind, "messages": received}))


if __name__ == "__main__":
    main(sys.argv[1:])
