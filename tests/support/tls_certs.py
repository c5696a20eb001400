"""A certificate authority and server certificates made for a test (``cryptography``), as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    file: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(d: Path, cn: str = "railscope test CA") -> CA:
    d.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    f = d / f"{cn.replace(' ', '-')}.pem"
    f.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return CA(key, cert, f)


def issue(ca: CA, cert_file: Path, key_file: Path, cn: str = "railscope-collector",
          ip: str = "127.0.0.1") -> int:
    """A server certificate for ``ip`` signed by ``ca``, written to the two files; its serial number."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    serial = x509.random_serial_number()
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.cert.subject)
            .public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip)),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca.key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    # Written as a Secret volume swaps them: each file whole, under a new inode.
    for path, data in ((key_file, key_pem), (cert_file, cert.public_bytes(serialization.Encoding.PEM))):
        tmp = path.with_suffix(path.suffix + ".new")
        tmp.write_bytes(data)
        tmp.chmod(0o600)
        tmp.replace(path)
    return serial


def served_serial(host: str, port: int, ca_file: Path) -> int:
    """The serial number of the certificate the server presents, verified against ``ca_file``."""
    import socket
    import ssl

    ctx = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection((host, port), timeout=5) as raw, ctx.wrap_socket(raw, server_hostname=host) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number
