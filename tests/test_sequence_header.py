"""Sequence affinity on the wire: the `x-sequence-id` HTTP header / gRPC metadata key, which a
load balancer hashes to route every turn of a conversation to one replica. When present it must
name the body's sequence id (HTTP 400 / gRPC INVALID_ARGUMENT otherwise); tritonclient sends it
through its `headers=` argument. With it, a turn of a sequence this replica does not hold is
UNAVAILABLE (the balancer tries the next replica)."""
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def value_input(proto, v):
    t = proto.InferInput("INPUT", [1, 1], "INT32")
    t.set_data_from_numpy(np.array([[v]], dtype=np.int32))
    return t


def turn(client, proto, seq, v, start=False, end=False, header=None):
    headers = {"x-sequence-id": str(seq if header is None else header)}
    res = client.infer("accumulate", [value_input(proto, v)], sequence_id=seq, sequence_start=start,
                       sequence_end=end, headers=headers)
    return int(res.as_numpy("OUTPUT")[0][0])


@pytest.mark.parametrize("proto", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_matching_header_serves_the_sequence(server, proto):
    url = server.http_url if proto is httpclient else server.grpc_url
    client = proto.InferenceServerClient(url)
    for seq in (4242, "chat-hdr"):
        assert turn(client, proto, seq, 3, start=True) == 3
        assert turn(client, proto, seq, 4) == 7
        assert turn(client, proto, seq, 5, end=True) == 12
    client.close()


@pytest.mark.parametrize("proto", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_different_or_lone_header_is_invalid_and_runs_nothing(server, proto):
    url = server.http_url if proto is httpclient else server.grpc_url
    client = proto.InferenceServerClient(url)
    with pytest.raises(InferenceServerException) as info:
        turn(client, proto, 5151, 1, start=True, header="5152")
    assert "x-sequence-id header '5152' does not match the request's sequence_id ('5151')" in info.value.message()
    assert info.value.status() == ("400" if proto is httpclient else "StatusCode.INVALID_ARGUMENT")
    # Nothing ran: the sequence was never started, so a turn without START is refused; with the
    # header as UNAVAILABLE (another replica may hold it: the balancer retries there), without
    # it with Triton's INVALID_ARGUMENT.
    with pytest.raises(InferenceServerException) as info:
        turn(client, proto, 5151, 1)
    assert "must specify the START flag" in info.value.message()
    assert "this replica does not hold the sequence" in info.value.message()
    assert info.value.status() == ("503" if proto is httpclient else "StatusCode.UNAVAILABLE")
    with pytest.raises(InferenceServerException) as info:
        client.infer("accumulate", [value_input(proto, 1)], sequence_id=5151)
    assert "must specify the START flag" in info.value.message()
    assert info.value.status() == ("400" if proto is httpclient else "StatusCode.INVALID_ARGUMENT")
    # A header on a request outside any sequence.
    with pytest.raises(InferenceServerException) as info:
        client.infer("identity_fp32", [_fp32(proto)], headers={"x-sequence-id": "9"})
    assert "sequence_id (none)" in info.value.message()
    client.close()


def _fp32(proto):
    t = proto.InferInput("INPUT0", [1, 2], "FP32")
    t.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
    return t


def test_raw_http_header_is_case_insensitive(server):
    body = {"parameters": {"sequence_id": 777, "sequence_start": True, "sequence_end": True},
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [9]}]}
    r = server.post("/v2/models/accumulate/infer", body, headers={"X-Sequence-Id": "777"})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [9]
    r = server.post("/v2/models/accumulate/infer", body, headers={"X-Sequence-Id": "778"})
    assert r.status_code == 400 and "does not match" in r.json()["error"]
