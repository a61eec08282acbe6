"""The node agent against a live platform during an XID storm: what NVML hands it in one
interval may exceed what the platform takes in one sample, and the agent must still ship it."""

from __future__ import annotations

from gpuagent.agent import MAX_XIDS_PER_SAMPLE, SampleBuffer, Sender
from scheduler.models import Node, NodeState
from telemetry.models import GpuErrorEvent, GpuSample

from .conftest import make_sample

XID_APPLICATION_FAULT = 13  # the job's doing: ignored by the default health rules
XID_FELL_OFF_THE_BUS = 79  # critical: quarantine at once


def test_an_xid_storm_is_shipped_and_its_critical_xid_quarantines_the_node(
    node1, agent_token, live_server
):
    """A job's XID 13 storm (150 in one interval) and, after it, the GPU's XID 79. The agent
    sent all 151 codes in one sample; the platform refuses more than 100 per sample, so the
    batch was refused, the agent dropped it, and the node that lost a GPU stayed ready."""
    storm = [XID_APPLICATION_FAULT] * 150 + [XID_FELL_OFF_THE_BUS]
    buffer = SampleBuffer(capacity=100)
    sender = Sender(live_server.url, agent_token, buffer, sleep=lambda s: None)
    buffer.extend([make_sample(gpu=0, xid=storm), make_sample(gpu=1)])

    assert sender.send_once() is True
    assert (sender.sent, sender.rejected) == (2, 0)
    assert GpuSample.objects.filter(node=node1).count() == 2
    # One row per code with its repeats: the 100 codes the sample carried, in two rows.
    rows = dict(GpuErrorEvent.objects.filter(node=node1, kind="xid").values_list("code", "count"))
    assert rows == {XID_APPLICATION_FAULT: MAX_XIDS_PER_SAMPLE - 1, XID_FELL_OFF_THE_BUS: 1}
    assert Node.objects.get(pk=node1.pk).state == NodeState.QUARANTINED
