import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fromBinary, create, toBinary, toJson, fromJson } from '@bufbuild/protobuf';
import {
  FileDescriptorProtoSchema,
  type DescriptorProto,
  type EnumDescriptorProto,
  type FileDescriptorProto,
} from '@bufbuild/protobuf/wkt';
import { describe, expect, it } from 'vitest';
import {
  file_filesystem_filesystem,
  file_process_process,
  StartResponseSchema,
  EntryInfoSchema,
  FileType,
} from '../envd/index.js';

// The static part of the conformance suite (no target): our envd protocol as the e2b SDK compiles it in.
// The e2b SDK embeds its envd descriptors as base64 FileDescriptorProtos; ours must match them on every
// name, number, type and streaming flag that reaches the wire (options such as go_package do not).
function sdkDescriptor(fileName: string): FileDescriptorProto {
  const require = createRequire(import.meta.url);
  const bundle = readFileSync(require.resolve('e2b'), 'utf8');
  const prefix = Buffer.from(`\n${String.fromCharCode(fileName.length)}${fileName}`)
    .toString('base64')
    .slice(0, 24);
  const match = new RegExp(`"(${prefix.replace(/[+/]/g, '\\$&')}[A-Za-z0-9+/=]*)"`).exec(bundle);
  if (!match?.[1]) throw new Error(`descriptor for ${fileName} not found in the e2b bundle`);
  return fromBinary(FileDescriptorProtoSchema, Buffer.from(match[1], 'base64'));
}

function shapeOfEnum(e: EnumDescriptorProto) {
  return { name: e.name, values: e.value.map((v) => [v.name, v.number]) };
}

function shapeOfMessage(m: DescriptorProto): unknown {
  return {
    name: m.name,
    fields: m.field.map((f) => ({
      name: f.name,
      number: f.number,
      label: f.label,
      type: f.type,
      typeName: f.typeName,
      oneof: f.oneofIndex,
      proto3Optional: f.proto3Optional,
    })),
    oneofs: m.oneofDecl.map((o) => o.name),
    nested: m.nestedType.map(shapeOfMessage),
    enums: m.enumType.map(shapeOfEnum),
    mapEntry: m.options?.mapEntry ?? false,
  };
}

function shapeOfFile(f: FileDescriptorProto) {
  return {
    name: f.name,
    package: f.package,
    messages: f.messageType.map(shapeOfMessage),
    enums: f.enumType.map(shapeOfEnum),
    services: f.service.map((s) => ({
      name: s.name,
      methods: s.method.map((m) => [
        m.name,
        m.inputType,
        m.outputType,
        !!m.clientStreaming,
        !!m.serverStreaming,
      ]),
    })),
  };
}

describe('envd protocol descriptors', () => {
  it('process.proto matches the e2b SDK descriptor', () => {
    expect(shapeOfFile(file_process_process.proto)).toEqual(
      shapeOfFile(sdkDescriptor('process/process.proto')),
    );
  });

  it('filesystem.proto matches the e2b SDK descriptor', () => {
    expect(shapeOfFile(file_filesystem_filesystem.proto)).toEqual(
      shapeOfFile(sdkDescriptor('filesystem/filesystem.proto')),
    );
  });

  it('encodes events as proto3 JSON the SDK expects', () => {
    const end = create(StartResponseSchema, {
      event: {
        event: { case: 'end', value: { exitCode: -1, exited: false, status: 'signal: killed', error: 'x' } },
      },
    });
    expect(toJson(StartResponseSchema, end)).toEqual({
      event: { end: { exitCode: -1, status: 'signal: killed', error: 'x' } },
    });
    const data = create(StartResponseSchema, {
      event: {
        event: { case: 'data', value: { output: { case: 'stdout', value: Buffer.from('hello\n') } } },
      },
    });
    expect(toJson(StartResponseSchema, data)).toEqual({ event: { data: { stdout: 'aGVsbG8K' } } });
    const entry = fromJson(EntryInfoSchema, {
      name: 'a',
      type: 'FILE_TYPE_FILE',
      size: '5',
      symlink_target: '/x',
    });
    expect(entry.type).toBe(FileType.FILE);
    expect(entry.size).toBe(5n);
    expect(entry.symlinkTarget).toBe('/x');
    expect(toBinary(EntryInfoSchema, entry).length).toBeGreaterThan(0);
  });
});
