"""The admission record (``tau.azure.com/admission``) is signed with the admission key and bound
to the object it was made for (``taugate.record``): a user can neither forge one nor copy one
from another object, and the webhook replaces a forged one at CREATE."""

from __future__ import annotations

import copy
import json

import jsonpatch
import pytest

from taugate import labels, record
from taugate.settings import Settings
from taugate.webhook.review import mutate, request_for
from tests import upstream_manifests as m

KEY = b"a-shared-admission-key-of-at-least-32-bytes"  # MIN_ADMISSION_KEY_BYTES


@pytest.fixture
def keyed(settings) -> Settings:
    return settings.model_copy(update={"admission_key": Settings(admission_key=KEY.decode()).admission_key})


def _created(obj: dict, state, settings, name: str | None = "pytorch-image-classifier-x7k2p") -> dict:
    """``obj`` through /mutate at CREATE, then stored by the API server under ``name``."""
    d = mutate(request_for(obj, namespace="vision"), state, settings)
    assert d.allowed, d.message
    out = jsonpatch.apply_patch(obj, d.patch) if d.patch else copy.deepcopy(obj)
    return m.stored(out, name) if name else out


def _record(obj: dict) -> dict:
    return json.loads(obj["metadata"]["annotations"][labels.ADMISSION_RECORD])


def test_the_webhooks_record_verifies_against_the_object_the_api_server_stores(state, keyed):
    stored = _created(m.classifier(), state, keyed)
    rec = _record(stored)
    assert rec["signature"].startswith("hmac-sha256:") and rec["runId"] == stored["metadata"]["labels"][labels.RUN_ID]
    # named by the API server after admission
    assert rec["object"] == {"namespace": "vision", "kind": "RayJob", "generateName": "pytorch-image-classifier-"}
    assert record.verify(rec, stored, KEY).trusted


@pytest.mark.parametrize("forge, why", [
    (lambda rec: rec.update(profile="h100-8gpu-premium"), "signature does not match"),
    (lambda rec: rec.pop("signature"), "not signed"),
    (lambda rec: rec.update(signature="hmac-sha256:" + "0" * 64), "signature does not match"),
])
def test_an_edited_or_unsigned_record_is_not_trusted(state, keyed, forge, why):
    stored = _created(m.classifier(), state, keyed)
    rec = _record(stored)
    forge(rec)
    check = record.verify(rec, stored, KEY)
    assert not check.trusted and why in check.reason


def test_a_record_signed_with_another_key_is_not_trusted(state, keyed):
    stored = _created(m.classifier(), state, keyed)
    assert "signature does not match" in record.verify(_record(stored), stored, b"another key").reason
    assert "no admission key" in record.verify(_record(stored), stored, None).reason


def test_a_record_copied_to_another_object_or_run_is_not_trusted(state, keyed):
    stored = _created(m.classifier(), state, keyed)
    other = copy.deepcopy(stored)
    other["metadata"]["name"] = "not-resnet"
    assert "a name generated from 'pytorch-image-classifier-'" in record.verify(_record(stored), other, KEY).reason
    elsewhere = copy.deepcopy(stored)
    elsewhere["metadata"]["namespace"] = "nlp"
    assert "namespace 'vision'" in record.verify(_record(stored), elsewhere, KEY).reason
    rerun = copy.deepcopy(stored)
    rerun["metadata"]["labels"][labels.RUN_ID] = "0123456789abcdef01234567"
    assert "carries run-id '0123456789abcdef01234567'" in record.verify(_record(stored), rerun, KEY).reason
    named = m.classifier()
    del named["metadata"]["generateName"]
    named["metadata"]["name"] = "resnet-fixed"
    job = _created(named, state, keyed, name=None)
    assert _record(job)["object"]["name"] == "resnet-fixed" and record.verify(_record(job), job, KEY).trusted
    renamed = copy.deepcopy(job)
    renamed["metadata"]["name"] = "resnet-fixed-2"
    assert "made for RayJob 'resnet-fixed'" in record.verify(_record(job), renamed, KEY).reason


def test_a_forged_record_at_create_is_replaced_by_the_webhooks_signed_one(state, keyed):
    # A fully pre-mutated object (as a replay of a stored one) needs no other change: only its
    # forged record is rewritten.
    stored = _created(m.classifier(), state, keyed, name=None)
    forged = copy.deepcopy(stored)
    rec = _record(forged)
    rec["workspace"] = "nlp"
    forged["metadata"]["annotations"][labels.ADMISSION_RECORD] = json.dumps(rec)
    again = _created(forged, state, keyed, name=None)
    assert _record(again)["workspace"] == "vision" and record.verify(_record(again), again, KEY).trusted
    # Reinvocation on the webhook's own output changes nothing.
    d = mutate(request_for(again, namespace="vision"), state, keyed)
    assert d.allowed and d.patch is None


def test_without_a_key_the_record_is_bound_but_unsigned_and_never_trusted(state, settings):
    stored = _created(m.classifier(), state, settings)
    rec = _record(stored)
    assert "signature" not in rec and rec["object"]["kind"] == "RayJob"
    assert not record.verify(rec, stored, KEY).trusted
