import { describe, expect, it } from 'vitest';
import { expandVars, shellQuote, translateDockerfile } from './dockerfile.js';

const error = (text: string, buildArgs?: Record<string, string>) => {
  try {
    translateDockerfile(text, buildArgs ? { buildArgs } : {});
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('no error');
};

describe('translateDockerfile', () => {
  it('turns every supported instruction into its step, in order', () => {
    const plan = translateDockerfile(
      [
        '# escape=\\',
        'ARG TAG=3',
        'FROM python:${TAG} AS app',
        'ARG TAG',
        'ARG MODE=dev',
        'ENV APP_HOME=/srv/app GREETING="hello world" \\',
        '    LEVEL=$MODE',
        'ENV OLD style value',
        'RUN apt-get update && \\',
        '    echo "$APP_HOME"',
        'RUN ["sh", "-c", "echo two words"]',
        'WORKDIR $APP_HOME',
        'USER app:app',
        'COPY --chown=app:app --chmod=0644 a.txt ./conf/ /etc/app/',
        'ADD src /srv/src',
        'EXPOSE 8080 9090/udp',
        'VOLUME ["/data", "/cache"]',
        'LABEL org.example.team=rl "quoted key"=v',
        'HEALTHCHECK --interval=5s CMD curl -f http://localhost:8080/ || exit 1',
        'ENTRYPOINT ["python", "-m"]',
        'CMD ["http.server", "8080"]',
      ].join('\n'),
      { buildArgs: { MODE: 'prod' } },
    );
    expect(plan.from).toBe('python:3');
    expect(plan.fromLine).toBe(3);
    expect(
      plan.steps.map((s) =>
        s.kind === 'copy' ? ['COPY', s.src, s.dest, s.user, s.mode] : [s.type, ...s.args],
      ),
    ).toEqual([
      ['ARG', 'TAG', '3'],
      ['ARG', 'MODE', 'prod'],
      ['ENV', 'APP_HOME', '/srv/app', 'GREETING', 'hello world', 'LEVEL', 'prod'],
      ['ENV', 'OLD', 'style value'],
      ['RUN', 'apt-get update &&     echo "$APP_HOME"'],
      ['RUN', "sh -c 'echo two words'"],
      ['WORKDIR', '/srv/app'],
      ['USER', 'app:app'],
      ['COPY', 'a.txt', '/etc/app/', 'app:app', '0644'],
      ['COPY', 'conf', '/etc/app/', 'app:app', '0644'],
      ['COPY', 'src', '/srv/src', undefined, undefined],
      ['EXPOSE', '8080'],
      ['EXPOSE', '9090/udp'],
      ['VOLUME', '/data'],
      ['VOLUME', '/cache'],
      ['LABEL', 'org.example.team', 'rl', 'quoted key', 'v'],
    ]);
    expect(plan.steps[0]).toMatchObject({ line: 4 });
    expect(plan.startCmd).toBe('python -m http.server 8080');
    expect(plan.readyCmd).toBe('curl -f http://localhost:8080/ || exit 1');
  });

  it('combines ENTRYPOINT and CMD as Docker does', () => {
    const start = (lines: string[]) => translateDockerfile(['FROM base', ...lines].join('\n')).startCmd;
    expect(start(['CMD node server.js'])).toBe('node server.js');
    expect(start(['CMD ["echo", "it\'s"]'])).toBe(`echo 'it'\\''s'`);
    expect(start(['ENTRYPOINT nginx -g "daemon off;"', 'CMD ignored'])).toBe('nginx -g "daemon off;"');
    expect(start(['ENTRYPOINT ["tini", "--"]', 'CMD sleep 1'])).toBe("tini -- /bin/sh -c 'sleep 1'");
    expect(start(['CMD a', 'CMD b'])).toBe('b');
    expect(start([])).toBeUndefined();
    expect(translateDockerfile('FROM base\nHEALTHCHECK CMD true\nHEALTHCHECK NONE').readyCmd).toBeUndefined();
  });

  it('refuses what a template build cannot honour, naming the line', () => {
    expect(error('FROM a\nRUN true\nFROM b')).toBe(
      'Dockerfile line 3: multi-stage Dockerfiles are not supported (FROM on lines 1, 3): a template build has one base',
    );
    expect(error('FROM a\n\nFROBNICATE x')).toBe('Dockerfile line 3: unknown instruction "FROBNICATE"');
    expect(error('RUN true')).toMatch(/^Dockerfile line 1: no FROM instruction/);
    expect(error('ENV A=1\nFROM a')).toMatch(/^Dockerfile line 1: ENV before FROM/);
    expect(error('FROM a\nCOPY ../secret /x')).toBe(
      'Dockerfile line 2: COPY ../secret: the source is outside the build context',
    );
    expect(error('FROM a\nCOPY sub/../../x /x')).toMatch(/outside the build context/);
    expect(error('FROM a\nCOPY /etc/passwd /x')).toMatch(/outside the build context/);
    expect(error('FROM a\nCOPY --from=builder /app /app')).toMatch(
      /^Dockerfile line 2: COPY --from is not supported/,
    );
    expect(error('FROM a\nCOPY a b /dir')).toMatch(/destination ending in \//);
    expect(error('FROM a\nADD https://example.com/x /x')).toMatch(/downloads are not supported/);
    expect(error('FROM a\nADD x.tar.gz /x')).toMatch(/archives are not unpacked/);
    expect(error('FROM a\nRUN --mount=type=cache,target=/c true')).toMatch(/RUN --mount is not supported/);
    expect(error('FROM a\nSHELL ["/bin/zsh", "-c"]')).toMatch(/^Dockerfile line 2: SHELL is not supported/);
    expect(error('FROM a\nSTOPSIGNAL SIGINT')).toMatch(/STOPSIGNAL is not supported/);
    expect(error('FROM scratch')).toMatch(/FROM scratch is not supported/);
    expect(error('FROM --platform=linux/arm64 a')).toMatch(/FROM --platform is not supported/);
    expect(error('FROM a\nCMD []')).toMatch(/CMD has an empty command/);
    expect(error('FROM a\nWORKDIR /a /b')).toMatch(/WORKDIR takes one argument/);
    expect(error('FROM a\nARG X', { Y: '1' })).toBe(
      'Dockerfile: --build-arg Y: the Dockerfile declares no ARG Y',
    );
  });
});

describe('expandVars and shellQuote', () => {
  it('expand what the Dockerfile set and leave the rest for the build', () => {
    const vars = new Map([
      ['A', 'x'],
      ['E', ''],
    ]);
    expect(expandVars('$A/${A}/${E:-d}/${A:+set}/${E:+set}/\\$A/$HOME', vars)).toBe('x/x/d/set//$A/$HOME');
    expect(shellQuote('plain-word_1.txt')).toBe('plain-word_1.txt');
    expect(shellQuote('two words')).toBe("'two words'");
  });
});
