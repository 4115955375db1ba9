import { describe, expect, it } from 'vitest';
import { EventType } from '@aenv/protocol/envd';
import { eventTypeOf } from './watch.js';

describe('eventTypeOf', () => {
  it('maps inotify masks like fsnotify', () => {
    expect(eventTypeOf(0x100)).toBe(EventType.CREATE);
    expect(eventTypeOf(0x100 | 0x40000000)).toBe(EventType.CREATE);
    expect(eventTypeOf(0x80)).toBe(EventType.CREATE);
    expect(eventTypeOf(0x2)).toBe(EventType.WRITE);
    expect(eventTypeOf(0x200)).toBe(EventType.REMOVE);
    expect(eventTypeOf(0x40)).toBe(EventType.RENAME);
    expect(eventTypeOf(0x4)).toBe(EventType.CHMOD);
    expect(eventTypeOf(0x8)).toBe(EventType.UNSPECIFIED);
  });
});
