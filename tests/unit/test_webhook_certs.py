"""The webhook's certificates: names, lifetimes, and every rotation step, on an injected clock."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from cryptography import x509

from computedomains import certificates
from computedomains.webhook import certs, tlspolicy

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
NAMES = tlspolicy.service_names("cd-cd-webhook", "cd-system", "cluster.local")
VALIDITY = tlspolicy.Validity(
    ca=365 * DAY,
    ca_renew_before=30 * DAY,
    cert=7 * DAY,
    cert_renew_before=2 * DAY,
    grace=datetime.timedelta(minutes=5),
)


def _step(bundle: certs.Bundle | None, now: datetime.datetime) -> tuple[certs.Action, certs.Bundle]:
    decision = certs.plan(bundle, now=now, names=NAMES, validity=VALIDITY)
    after = certs.carry_out(decision, bundle, now=now, names=NAMES, validity=VALIDITY)
    return decision.action, after


def _fresh() -> certs.Bundle:
    action, bundle = _step(None, T0)
    assert action is certs.Action.BOOTSTRAP
    return bundle


def test_service_names_cover_every_way_the_api_server_names_the_service() -> None:
    assert NAMES == (
        "cd-cd-webhook",
        "cd-cd-webhook.cd-system",
        "cd-cd-webhook.cd-system.svc",
        "cd-cd-webhook.cd-system.svc.cluster.local",
    )


def test_bootstrap_makes_a_ca_and_a_serving_certificate_it_signed() -> None:
    bundle = _fresh()
    [ca] = bundle.cas
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert bundle.issuer_of_cert() == 0
    assert sorted(certs.dns_names(bundle.cert)) == sorted(NAMES)
    usage = bundle.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage
    assert not bundle.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_lifetimes_start_backdated_and_follow_the_validity() -> None:
    bundle = _fresh()
    assert bundle.cas[0].not_valid_before_utc == T0 - certificates.BACKDATE
    assert bundle.cas[0].not_valid_after_utc == T0 + VALIDITY.ca
    assert bundle.cert.not_valid_after_utc == T0 + VALIDITY.cert


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    short = dataclasses.replace(VALIDITY, ca=3 * DAY, ca_renew_before=DAY, cert=7 * DAY)
    decision = certs.plan(None, now=T0, names=NAMES, validity=short)
    bundle = certs.carry_out(decision, None, now=T0, names=NAMES, validity=short)
    assert bundle.cert.not_valid_after_utc == bundle.cas[0].not_valid_after_utc


def test_the_secret_data_round_trips() -> None:
    bundle = _fresh()
    again = certs.from_secret_data(bundle.secret_data(), need_ca_key=True)
    assert again.cas == bundle.cas and again.cert == bundle.cert
    assert certificates.key_pem(again.key) == certificates.key_pem(bundle.key)
    assert again.ca_key is not None and bundle.ca_key is not None
    assert certificates.key_pem(again.ca_key) == certificates.key_pem(bundle.ca_key)
    assert set(bundle.secret_data()) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}


@pytest.mark.parametrize(
    ("drop", "need_ca_key", "message"),
    [("tls.key", False, "missing tls.key"), ("ca.key", True, "missing ca.key")],
)
def test_an_incomplete_secret_is_invalid(drop: str, need_ca_key: bool, message: str) -> None:
    data = _fresh().secret_data()
    del data[drop]
    with pytest.raises(certs.Invalid, match=message):
        certs.from_secret_data(data, need_ca_key=need_ca_key)


def test_cert_manager_data_without_a_ca_key_is_readable() -> None:
    data = _fresh().secret_data()
    del data["ca.key"]
    assert certs.from_secret_data(data, need_ca_key=False).ca_key is None


def test_garbage_is_invalid() -> None:
    with pytest.raises(certs.Invalid, match="base64"):
        certs.from_secret_data({"ca.crt": "%%%"}, need_ca_key=False)
    data = _fresh().secret_data() | {"tls.crt": "bm90IGEgY2VydA=="}
    with pytest.raises(certs.Invalid, match="PEM"):
        certs.from_secret_data(data, need_ca_key=False)


def test_a_current_bundle_is_kept() -> None:
    bundle = _fresh()
    assert certs.plan(bundle, now=T0 + DAY, names=NAMES, validity=VALIDITY).action is (
        certs.Action.KEEP
    )


def test_the_serving_certificate_is_renewed_before_it_ends() -> None:
    bundle = _fresh()
    due = T0 + VALIDITY.cert - VALIDITY.cert_renew_before
    assert certs.plan(bundle, now=due - DAY, names=NAMES, validity=VALIDITY).action is (
        certs.Action.KEEP
    )
    action, renewed = _step(bundle, due)
    assert action is certs.Action.NEW_CERT
    assert renewed.cas == bundle.cas  # same CA: nothing to tell the API servers
    assert renewed.cert.not_valid_after_utc == due + VALIDITY.cert


def test_other_names_need_a_new_certificate() -> None:
    bundle = _fresh()
    other = tlspolicy.service_names("renamed", "cd-system", "cluster.local")
    decision = certs.plan(bundle, now=T0, names=other, validity=VALIDITY)
    assert decision.action is certs.Action.NEW_CERT and "names" in decision.reason


def test_a_key_of_another_certificate_needs_a_new_certificate() -> None:
    bundle = _fresh()
    mixed = dataclasses.replace(bundle, key=_fresh().key)
    decision = certs.plan(mixed, now=T0, names=NAMES, validity=VALIDITY)
    assert decision.action is certs.Action.NEW_CERT and "tls.key" in decision.reason


def test_a_ca_key_of_another_ca_starts_over() -> None:
    bundle = _fresh()
    mixed = dataclasses.replace(bundle, ca_key=_fresh().ca_key)
    assert certs.plan(mixed, now=T0, names=NAMES, validity=VALIDITY).action is (
        certs.Action.BOOTSTRAP
    )


def test_an_expired_ca_starts_over() -> None:
    bundle = _fresh()
    assert certs.plan(bundle, now=T0 + VALIDITY.ca, names=NAMES, validity=VALIDITY).action is (
        certs.Action.BOOTSTRAP
    )


def test_the_ca_is_rotated_with_overlap_in_three_steps() -> None:
    """New CA trusted first; its certificate after the grace; the old CA dropped after that."""
    old = _fresh()
    due = T0 + VALIDITY.ca - VALIDITY.ca_renew_before
    action, trusted = _step(old, due)
    assert action is certs.Action.NEW_CA
    assert trusted.cas[1:] == old.cas and trusted.cert == old.cert  # old cert still served
    assert trusted.ca_pem.count(b"BEGIN CERTIFICATE") == 2
    # Within the grace, the API servers may not have the new bundle: keep serving the old cert.
    waiting = certs.plan(trusted, now=due + VALIDITY.grace / 2, names=NAMES, validity=VALIDITY)
    assert waiting.action is certs.Action.KEEP
    action, moved = _step(trusted, due + VALIDITY.grace)
    assert action is certs.Action.NEW_CERT
    assert moved.issuer_of_cert() == 0 and len(moved.cas) == 2
    # The other replica may still serve the old certificate for a grace: keep the old CA.
    soon = due + VALIDITY.grace + VALIDITY.grace / 2
    assert certs.plan(moved, now=soon, names=NAMES, validity=VALIDITY).action is certs.Action.KEEP
    action, done = _step(moved, due + 2 * VALIDITY.grace)
    assert action is certs.Action.DROP_OLD_CAS
    assert done.cas == moved.cas[:1] and done.cert == moved.cert
    assert certs.plan(
        done, now=due + 3 * VALIDITY.grace, names=NAMES, validity=VALIDITY
    ).action is (certs.Action.KEEP)


def test_a_certificate_signed_by_no_trusted_ca_is_replaced() -> None:
    bundle = _fresh()
    stranger = dataclasses.replace(bundle, cert=_fresh().cert)
    decision = certs.plan(stranger, now=T0, names=NAMES, validity=VALIDITY)
    assert decision.action is certs.Action.NEW_CERT and "no trusted CA" in decision.reason


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"ca_renew_before": 400 * DAY}, "CA's renew-before must be shorter"),
        ({"cert_renew_before": 7 * DAY}, "certificate's renew-before must be shorter"),
        ({"ca_renew_before": 2 * DAY}, "room for the rotation"),
    ],
)
def test_unusable_validities_are_named(change: dict[str, datetime.timedelta], problem: str) -> None:
    problems = dataclasses.replace(VALIDITY, **change).problems()
    assert any(problem in p for p in problems), problems
    assert VALIDITY.problems() == []


def test_an_ip_address_name_becomes_an_ip_san() -> None:
    names = (*NAMES, "127.0.0.1")
    decision = certs.plan(None, now=T0, names=names, validity=VALIDITY)
    bundle = certs.carry_out(decision, None, now=T0, names=names, validity=VALIDITY)
    sans = bundle.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sorted(certs.dns_names(bundle.cert)) == sorted(names)
    assert certs.plan(bundle, now=T0, names=names, validity=VALIDITY).action is certs.Action.KEEP
