// Prints what the test's nodes logged when a test fails: in CI that output is all there is to go on.
import { beforeEach } from 'vitest';
import { logsForFailure } from './harness.js';

beforeEach(({ onTestFailed }) => {
  onTestFailed(() => {
    const text = logsForFailure();
    if (text) console.error(text);
  });
});
