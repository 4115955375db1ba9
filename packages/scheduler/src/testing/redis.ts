/** The test Redis (test/services): $AENV_TEST_REDIS_URL, else the default the services use. */
export function redisUrl(db?: number): string {
  const base = (process.env.AENV_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379').replace(/\/\d*$/, '');
  return db === undefined ? base : `${base}/${db}`;
}
