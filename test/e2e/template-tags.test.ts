// Template tags through the e2b SDK (Template.build with name:tag and tags, assignTags, removeTags, getTags,
// exists, Sandbox.create('name:tag')), PATCH /v2/templates/{id}, GET /teams, and hostile callers.
import { afterAll, describe, expect, it } from 'vitest';
import { Sandbox, Template } from 'e2b';
import { describeNode } from './fixture.js';

const BASE = 'oci:/var/cache/aenv/images/base:latest';
const RUN = `r${Date.now().toString(36)}`;
const NAME = `${RUN}-tags`;

describe('template tags', () => {
  const { server } = describeNode({ name: 'ttags' });
  let templateId: string;

  afterAll(async () => {
    await server.killAll();
    if (templateId) await server.api('DELETE', `/templates/${templateId}`);
  });

  const tagNames = async (ref: string) => (await Template.getTags(ref)).map((t) => t.tag);

  it('builds name:tag with more tags, assigns and removes tags, and creates sandboxes by tag', async () => {
    const t = Template().fromImage(BASE).runCmd(`echo ${RUN} > /tmp/tagged`, { user: 'root' });
    const built = await Template.build(t, `${NAME}:v1`, { tags: ['beta'], cpuCount: 1, memoryMB: 512 });
    templateId = built.templateId;
    expect(await tagNames(NAME)).toEqual(['default', 'v1', 'beta']);
    const tags = await Template.getTags(templateId);
    expect(tags.every((x) => x.buildId === built.buildId && x.createdAt instanceof Date)).toBe(true);

    expect(await Template.assignTags(`${NAME}:v1`, ['prod', 'stable'])).toEqual({
      buildId: built.buildId,
      tags: ['prod', 'stable'],
    });
    expect(await tagNames(NAME)).toEqual(['default', 'v1', 'beta', 'prod', 'stable']);
    expect(await Template.exists(`${NAME}:prod`)).toBe(true);
    expect(await Template.exists(`${NAME}:nope`)).toBe(false);

    const sbx = await Sandbox.create(`${NAME}:prod`, { timeoutMs: 120_000 });
    expect((await sbx.commands.run('cat /tmp/tagged')).stdout.trim()).toBe(RUN);
    expect((await sbx.getInfo()).templateId).toBe(templateId);
    await sbx.kill();
    const plain = await Sandbox.create(`team/${NAME}:default`, { timeoutMs: 120_000 });
    await plain.kill();
    await expect(Sandbox.create(`${NAME}:nope`)).rejects.toThrow(/not found/);

    await Template.removeTags(NAME, ['stable', 'beta']);
    expect(await tagNames(NAME)).toEqual(['default', 'v1', 'prod']);
    await expect(Template.removeTags(NAME, 'stable')).rejects.toThrow(/tag "stable" not found/);
    await expect(Template.removeTags(NAME, 'default')).rejects.toThrow(/cannot be removed/);
    await expect(Template.assignTags(`${NAME}:stable`, 'x')).rejects.toThrow(/not found/);
    await expect(Sandbox.create(`${NAME}:stable`)).rejects.toThrow(/not found/);
  });

  it('PATCH /v2/templates/{id} records the public flag; GET /teams answers the one local team', async () => {
    const off = await server.api('PATCH', `/v2/templates/${NAME}`, { public: false });
    expect(off).toMatchObject({ status: 200, body: { names: [NAME] } });
    const listed = (await server.api('GET', '/v2/templates')).body as {
      templateID: string;
      public: boolean;
    }[];
    expect(listed.find((x) => x.templateID === templateId)?.public).toBe(false);
    expect((await server.api('GET', `/templates/${templateId}`)).body.public).toBe(false);
    expect((await server.api('PATCH', `/templates/${templateId}`, { public: true })).status).toBe(200);
    expect((await server.api('GET', `/templates/${templateId}`)).body.public).toBe(true);

    const teams = await server.api('GET', '/teams');
    expect(teams.status).toBe(200);
    expect(teams.body).toEqual([
      {
        teamID: expect.stringMatching(/^[0-9a-f-]{36}$/),
        name: 'local',
        apiKey: server.apiKey,
        isDefault: true,
      },
    ]);
    const teamId = teams.body[0].teamID as string;
    expect((await server.api('GET', `/templates?teamID=${teamId}`)).status).toBe(200);
    expect((await server.api('GET', `/v2/templates?teamID=${teamId}`)).status).toBe(200);
    const other = await server.api('GET', '/templates?teamID=00000000-0000-0000-0000-000000000000');
    expect(other.status).toBe(403);
    expect(other.body.code).toBe(403);
  });

  it('answers hostile tag and update requests with 4xx {code, message} and stores nothing', async () => {
    const before = await tagNames(NAME);
    const cases: [string, string, unknown, number][] = [
      ['POST', '/templates/tags', { target: `${NAME}:v1`, tags: ['bad tag'] }, 400],
      ['POST', '/templates/tags', { target: `${NAME}:v1`, tags: ['💥'] }, 400],
      ['POST', '/templates/tags', { target: `${NAME}:v1`, tags: ['.hidden'] }, 400],
      ['POST', '/templates/tags', { target: `${NAME}:v1`, tags: ['t'.repeat(129)] }, 400],
      [
        'POST',
        '/templates/tags',
        { target: `${NAME}:v1`, tags: Array.from({ length: 65 }, (_, i) => `t${i}`) },
        400,
      ],
      ['POST', '/templates/tags', { target: `${NAME}:v1`, tags: [] }, 400],
      ['POST', '/templates/tags', { target: `${NAME}:v1`, tags: 'prod' }, 400],
      ['POST', '/templates/tags', { target: `${NAME}:v1`, tags: ['ok'], extra: 1 }, 400],
      ['POST', '/templates/tags', { target: `team/${NAME}:v1`, tags: ['ok'] }, 400],
      ['POST', '/templates/tags', { target: 'x'.repeat(5000), tags: ['ok'] }, 400],
      ['POST', '/templates/tags', { target: `${RUN}-nosuch:v1`, tags: ['ok'] }, 404],
      ['POST', '/templates/tags', { target: `${NAME}:nosuch`, tags: ['ok'] }, 404],
      ['POST', '/templates/tags', 'not json', 400],
      ['DELETE', '/templates/tags', { name: `${NAME}:v1`, tags: ['v1'] }, 400],
      ['DELETE', '/templates/tags', { name: NAME, tags: ['default'] }, 400],
      ['DELETE', '/templates/tags', { name: NAME, tags: ['v1', 'nosuch'] }, 404],
      ['DELETE', '/templates/tags', { name: NAME }, 400],
      ['GET', `/templates/${RUN}-nosuch/tags`, undefined, 404],
      ['GET', `/templates/${encodeURIComponent('💥')}/tags`, undefined, 400],
      ['GET', `/templates/aliases/${NAME}:${encodeURIComponent('💥')}`, undefined, 400],
      ['PATCH', `/v2/templates/${NAME}`, { public: 'yes' }, 400],
      ['PATCH', `/v2/templates/${NAME}`, { names: ['x'] }, 400],
      ['PATCH', `/v2/templates/${RUN}-nosuch`, { public: true }, 404],
      ['POST', '/v3/templates', { name: `${RUN}-new:bad tag` }, 400],
      ['POST', '/v3/templates', { name: `${RUN}-new:` }, 400],
      ['POST', '/v3/templates', { name: `${RUN}-new`, tags: ['ok', '../x'] }, 400],
    ];
    for (const [method, path, body, status] of cases) {
      const r =
        typeof body === 'string'
          ? await fetch(`${server.url}${path}`, {
              method,
              headers: { 'x-api-key': server.apiKey, 'content-type': 'application/json' },
              body,
            }).then(async (x) => ({ status: x.status, body: await x.json() }))
          : await server.api(method, path, body);
      expect(r.status, `${method} ${path} ${JSON.stringify(body)?.slice(0, 80)}`).toBe(status);
      expect(r.body.code).toBe(status);
      expect(typeof r.body.message).toBe('string');
      expect(r.body.message.length).toBeLessThan(400);
    }
    for (const [method, path] of [
      ['POST', '/templates/tags'],
      ['DELETE', '/templates/tags'],
      ['GET', `/templates/${NAME}/tags`],
      ['PATCH', `/v2/templates/${NAME}`],
      ['GET', '/teams'],
    ] as const) {
      const r = await fetch(`${server.url}${path}`, {
        method,
        headers: { 'content-type': 'application/json' },
        body:
          method === 'GET' ? undefined : JSON.stringify({ target: `${NAME}:v1`, name: NAME, tags: ['evil'] }),
      });
      expect(r.status, `${method} ${path}`).toBe(401);
    }
    expect(await tagNames(NAME)).toEqual(before);
    expect(
      (await server.api('GET', '/v2/templates')).body.some(
        (x: { names: string[] }) => x.names[0] === `${RUN}-new`,
      ),
    ).toBe(false);
  });
});
