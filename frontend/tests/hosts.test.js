// node --test frontend/tests/: a run across hosts, in the ring and in the timeline's rows.
import assert from "node:assert/strict";
import { test } from "node:test";

import { crossesHosts } from "../draw_ddp.js";
import { hostBoundaries, rowLabels } from "../timeline.js";

const PIC = {
  hosts: ["node0", "node1"],
  devices: [
    { label: "rank 0 · cpu · gloo", host: "node0" }, { label: "rank 1 · cpu · gloo", host: "node0" },
    { label: "rank 2 · cpu · gloo", host: "node1" }, { label: "rank 3 · cpu · gloo", host: "node1" },
  ],
};

test("only the hops between two hosts cross them", () => {
  const d = PIC.devices;
  assert.deepEqual([[0, 1], [1, 2], [2, 3], [3, 0]].map(([a, b]) => crossesHosts(d[a], d[b])),
    [false, true, false, true]);
  assert.equal(crossesHosts({ label: "rank 0" }, { label: "rank 1" }), false);  // one host: no hosts sent
});

test("the timeline's rows name their host and end each host's group", () => {
  assert.deepEqual(rowLabels(PIC), ["node0 · rank 0 · cpu · gloo", "node0 · rank 1 · cpu · gloo",
    "node1 · rank 2 · cpu · gloo", "node1 · rank 3 · cpu · gloo"]);
  assert.deepEqual([...hostBoundaries(PIC)], [1]);
  const one = { hosts: null, devices: PIC.devices.map((d) => ({ label: d.label })) };
  assert.deepEqual(rowLabels(one), one.devices.map((d) => d.label));
  assert.equal(hostBoundaries(one).size, 0);
});
