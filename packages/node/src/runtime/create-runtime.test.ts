import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '@aenv/config';
import { runServer } from '../server.js';
import { createRuntime, runtimeFactory } from './create-runtime.js';

const configIn = (mode: string) =>
  loadConfig({ configPath: undefined, env: { AENV_VIRTUALIZATION_MODE: mode }, flags: {} }).config;

describe('createRuntime', () => {
  it('has a driver for virtualization_mode = "container"', () => {
    expect(typeof runtimeFactory('container')).toBe('function');
  });

  it('refuses a mode this build has no driver for, naming the key', async () => {
    for (const mode of ['kvm', 'pvm'] as const) {
      const err = await createRuntime(configIn(mode), {} as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toContain(`virtualization_mode = "${mode}"`);
      expect((err as Error).message).toContain('no driver');
    }
  });

  it('makes `aenv server` exit with the configuration error before it touches the host', async () => {
    const stderr: string[] = [];
    const write = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string) => stderr.push(chunk) > 0) as typeof process.stderr.write;
    try {
      const code = await runServer({ setupOnly: false, env: { AENV_VIRTUALIZATION_MODE: 'kvm' } });
      expect(code).toBe(2);
    } finally {
      process.stderr.write = write;
    }
    expect(stderr.join('')).toMatch(/virtualization_mode = "kvm".*no driver/s);
  });
});
