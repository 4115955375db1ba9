import { create, fromBinary, isFieldSet, toBinary } from '@bufbuild/protobuf';
import {
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FieldDescriptorProtoSchema,
} from '@bufbuild/protobuf/wkt';
import { describe, expect, it } from 'vitest';
import {
  file_scheduler_v1_scheduler,
  HeartbeatRequestSchema,
  NodeStatus,
  SandboxEventType,
  ScheduleRequestSchema,
} from './index.js';

// The reference's scheduler.v1 contract, written out field by field ("name number type", `[]` = repeated,
// `map` = map entry, `|kind` = member of oneof `kind`). A reference node, gateway or scheduler decodes our
// bytes with its own copy of these numbers, so a drift here is a wire break.
const MESSAGES: Record<string, string[]> = {
  Node: ['node_id 1 string', 'endpoint 2 string'],
  ScheduleRequestHint: [
    'new_cold_sandbox 1 .scheduler.v1.NewColdSandboxHint |kind',
    'new_sandbox 2 .scheduler.v1.NewSandboxHint |kind',
  ],
  NewColdSandboxHint: ['cpu_count 1 uint32', 'memory_mb 2 uint64', 'images 3 string[]', 'metadata 4 map'],
  NewSandboxHint: ['metadata 1 map'],
  ScheduleRequest: ['hint 2 .scheduler.v1.ScheduleRequestHint'],
  ScheduleResponse: ['node 1 .scheduler.v1.Node'],
  ListNodesRequest: [],
  ListNodesResponse: ['nodes 1 .scheduler.v1.Node[]'],
  LookupNodeRequest: ['sandbox_id 1 string'],
  LookupNodeResponse: ['node 1 .scheduler.v1.Node'],
  RecordAssignmentRequest: ['sandbox_id 1 string', 'node 2 .scheduler.v1.Node'],
  RecordAssignmentResponse: [],
  MachineInfo: [
    'cpu_family 1 string',
    'cpu_model 2 string',
    'cpu_model_name 3 string',
    'cpu_architecture 4 string',
    'cpu_config_json 5 string',
  ],
  DiskMetric: [
    'mount_point 1 string',
    'device 2 string',
    'filesystem_type 3 string',
    'used_bytes 4 uint64',
    'total_bytes 5 uint64',
  ],
  NodeSnapshot: [
    'status 1 .scheduler.v1.NodeStatus',
    'allocated_cpu 2 uint32',
    'allocated_memory_bytes 3 uint64',
    'cpu_percent 4 uint32',
    'cpu_count 5 uint32',
    'memory_used_bytes 6 uint64',
    'memory_total_bytes 7 uint64',
    'disks 8 .scheduler.v1.DiskMetric[]',
    'sandbox_count 9 uint32',
    'sandbox_starting_count 10 uint32',
    'create_successes 11 uint64',
    'create_fails 12 uint64',
    'reported_at_unix_ms 13 int64',
    'paused_sandbox_count 14 uint32',
    'paused_allocated_cpu 15 uint32',
    'paused_allocated_memory_bytes 16 uint64',
  ],
  P2pEndpoint: ['backend 1 string', 'address 2 string'],
  ObservedNode: [
    'node_id 1 string',
    'endpoint 2 string',
    'cluster_id 3 string',
    'service_instance_id 4 string',
    'version 5 string',
    'commit 6 string',
    'machine_info 7 .scheduler.v1.MachineInfo',
    'snapshot 8 .scheduler.v1.NodeSnapshot',
    'last_seen_unix_ms 9 int64',
  ],
  HeartbeatRequest: [
    'node_id 1 string',
    'cluster_id 2 string',
    'service_instance_id 3 string',
    'version 4 string',
    'commit 5 string',
    'machine_info 6 .scheduler.v1.MachineInfo',
    'snapshot 7 .scheduler.v1.NodeSnapshot',
    'sandbox_ids 8 string[]',
    'p2p_endpoint 9 .scheduler.v1.P2pEndpoint',
  ],
  HeartbeatResponse: ['cpu_config_json 1 string'],
  SandboxEvent: [
    'sandbox_id 1 string',
    'event_type 2 .scheduler.v1.SandboxEventType',
    'requested_cpu 3 uint32',
    'requested_memory_bytes 4 uint64',
    'requested_disk_bytes 5 uint64',
  ],
  ReportSandboxEventRequest: [
    'node_id 1 string',
    'cluster_id 2 string',
    'service_instance_id 3 string',
    'events 4 .scheduler.v1.SandboxEvent[]',
  ],
  ReportSandboxEventResponse: [],
  ListObservedNodesRequest: ['cluster_id 1 string'],
  ListObservedNodesResponse: ['nodes 1 .scheduler.v1.ObservedNode[]'],
  P2pPeer: ['node_id 1 string', 'endpoint 2 .scheduler.v1.P2pEndpoint'],
  ListP2pPeersRequest: ['cluster_id 1 string', 'backend 2 string', 'exclude_node_id 3 string'],
  ListP2pPeersResponse: ['peers 1 .scheduler.v1.P2pPeer[]'],
  RecordP2pArtifactRequest: ['cluster_id 1 string', 'backend 2 string', 'key 3 string', 'node_id 4 string'],
  RecordP2pArtifactResponse: [],
  ForgetP2pArtifactRequest: ['cluster_id 1 string', 'backend 2 string', 'key 3 string', 'node_id 4 string'],
  ForgetP2pArtifactResponse: [],
  LookupP2pArtifactRequest: [
    'cluster_id 1 string',
    'backend 2 string',
    'key 3 string',
    'exclude_node_id 4 string',
  ],
  LookupP2pArtifactResponse: ['peers 1 .scheduler.v1.P2pPeer[]'],
  GetNodeRequest: ['node_id 1 string', 'cluster_id 2 string'],
  GetNodeResponse: ['node 1 .scheduler.v1.ObservedNode'],
  UnregisterNodeRequest: ['node_id 1 string', 'service_instance_id 2 string'],
  UnregisterNodeResponse: [],
};

const RPCS = [
  'Schedule',
  'ListNodes',
  'LookupNode',
  'RecordAssignment',
  'Heartbeat',
  'ReportSandboxEvent',
  'ListObservedNodes',
  'ListP2pPeers',
  'RecordP2pArtifact',
  'ForgetP2pArtifact',
  'LookupP2pArtifact',
  'GetNode',
  'UnregisterNode',
];

const proto = file_scheduler_v1_scheduler.proto;

function describeFields(name: string): string[] {
  const message = proto.messageType.find((m) => m.name === name);
  if (!message) throw new Error(`message ${name} missing`);
  return message.field.map((f) => {
    const repeated = f.label === FieldDescriptorProto_Label.REPEATED;
    const isMap =
      repeated && message.nestedType.some((n) => `.scheduler.v1.${name}.${n.name}` === f.typeName);
    const type = f.typeName || FieldDescriptorProto_Type[f.type].toLowerCase();
    const oneof = !isFieldSet(f, FieldDescriptorProtoSchema.field.oneofIndex)
      ? ''
      : ` |${message.oneofDecl[f.oneofIndex]?.name}`;
    return `${f.name} ${f.number} ${isMap ? 'map' : `${type}${repeated ? '[]' : ''}`}${oneof}`;
  });
}

describe('scheduler.v1 wire contract', () => {
  it('is package scheduler.v1 with every message of the reference and nothing renumbered', () => {
    expect(proto.package).toBe('scheduler.v1');
    expect(proto.messageType.map((m) => m.name).sort()).toEqual(Object.keys(MESSAGES).sort());
    for (const [name, fields] of Object.entries(MESSAGES)) expect(describeFields(name), name).toEqual(fields);
  });

  it('keeps ScheduleRequest field 1 reserved', () => {
    const request = proto.messageType.find((m) => m.name === 'ScheduleRequest');
    expect(request?.reservedRange.map((r) => [r.start, r.end])).toEqual([[1, 2]]);
  });

  it('has the enums with the reference values', () => {
    expect(NodeStatus).toMatchObject({ UNSPECIFIED: 0, READY: 1, CONNECTING: 2, UNHEALTHY: 3, LINGERING: 4 });
    expect(SandboxEventType).toMatchObject({
      UNSPECIFIED: 0,
      CREATE: 1,
      DELETE: 2,
      PAUSE: 3,
      RESUME: 4,
      FORK: 5,
    });
    const values = (name: string) =>
      proto.enumType.find((e) => e.name === name)?.value.map((v) => `${v.name}=${v.number}`);
    expect(values('NodeStatus')).toEqual([
      'NODE_STATUS_UNSPECIFIED=0',
      'NODE_STATUS_READY=1',
      'NODE_STATUS_CONNECTING=2',
      'NODE_STATUS_UNHEALTHY=3',
      'NODE_STATUS_LINGERING=4',
    ]);
    expect(values('SandboxEventType')).toEqual([
      'SANDBOX_EVENT_TYPE_UNSPECIFIED=0',
      'SANDBOX_EVENT_TYPE_CREATE=1',
      'SANDBOX_EVENT_TYPE_DELETE=2',
      'SANDBOX_EVENT_TYPE_PAUSE=3',
      'SANDBOX_EVENT_TYPE_RESUME=4',
      'SANDBOX_EVENT_TYPE_FORK=5',
    ]);
  });

  it('serves every RPC of the reference as unary calls of scheduler.v1.Scheduler', () => {
    const service = proto.service.find((s) => s.name === 'Scheduler');
    expect(service?.method.map((m) => m.name)).toEqual(RPCS);
    for (const m of service?.method ?? []) {
      expect([m.inputType, m.outputType, !!m.clientStreaming, !!m.serverStreaming]).toEqual([
        `.scheduler.v1.${m.name}Request`,
        `.scheduler.v1.${m.name}Response`,
        false,
        false,
      ]);
    }
  });

  it('encodes a hint and a roster as the reference reads them (field 2 tag, packed strings)', () => {
    const request = create(ScheduleRequestSchema, {
      hint: { kind: { case: 'newColdSandbox', value: { cpuCount: 2, memoryMb: 512n } } },
    });
    // 0x12 = field 2, length-delimited; inside: 0x0a = hint field 1 (new_cold_sandbox).
    expect(Buffer.from(toBinary(ScheduleRequestSchema, request)).toString('hex')).toBe(
      '1207' + '0a05' + '0802108004',
    );
    const heartbeat = fromBinary(
      HeartbeatRequestSchema,
      toBinary(
        HeartbeatRequestSchema,
        create(HeartbeatRequestSchema, { nodeId: 'n', sandboxIds: ['a', 'b'] }),
      ),
    );
    expect(heartbeat.sandboxIds).toEqual(['a', 'b']);
  });
});
