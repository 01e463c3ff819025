#!/usr/bin/env node
// Test-only S3 server: s3rver (storage, S3 semantics) behind a front that
// does what s3rver 3.7.1 does not: it verifies AWS Signature Version 4
// completely (s3rver only checks that the access key id exists, see
// lib/middleware/authentication.js: "Signature version 4 calculation is
// unimplemeneted") and the payload digest in x-amz-content-sha256.
// A client whose signing is wrong therefore fails here as it would against
// AWS. Loopback only; never a production component.
//
// Accounts: S3RVER/S3RVER (s3rver's default) and ASIATESTTEMPORARY/
// test-temporary-secret, which also requires X-Amz-Security-Token
// "test-session-token" (temporary credentials).
//
// Test control endpoints (unauthenticated, loopback test use only):
//   POST /__s3test/fail?count=N&status=S[&code=C][&match=SUBSTR]
//        answer the next N S3 requests (whose "METHOD path?query" contains
//        SUBSTR, when given) with status S after authentication
//        (S = 0: close the connection without an answer)
//   GET  /__s3test/log     JSON array of the S3 requests seen (most recent last)
//   POST /__s3test/reset   clear the log and pending failures
//
// Usage: node sigv4-front.js --dir DATA_DIR --ready-file FILE [--port N]
// Writes the front's port to FILE once both servers listen.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const http = require('http');
const path = require('path');

const S3rver = require('s3rver');

const ACCOUNTS = {
  S3RVER: { secret: 'S3RVER', token: null },
  ASIATESTTEMPORARY: { secret: 'test-temporary-secret', token: 'test-session-token' },
};
const MAX_BODY = 256 * 1024 * 1024;
const MAX_SKEW_MS = 15 * 60 * 1000;
const MAX_LOG = 2000;

function parseArgs(argv) {
  const out = { port: 0, dir: null, readyFile: null };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--port') out.port = Number(argv[++i]);
    else if (a === '--dir') out.dir = argv[++i];
    else if (a === '--ready-file') out.readyFile = argv[++i];
    else throw new Error(`unknown argument ${a}`);
  }
  if (!out.dir || !out.readyFile) throw new Error('--dir and --ready-file are required');
  return out;
}

function xmlEscape(s) {
  return String(s).replace(/[<>&'"]/g, c => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c]);
}

function sendError(res, status, code, message) {
  const body =
    '<?xml version="1.0" encoding="UTF-8"?>\n' +
    `<Error><Code>${xmlEscape(code)}</Code><Message>${xmlEscape(message)}</Message>` +
    `<RequestId>${crypto.randomBytes(8).toString('hex')}</RequestId></Error>`;
  res.writeHead(status, { 'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body) });
  res.end(body);
}

// RFC 3986 encoding as SigV4 wants it: everything but A-Z a-z 0-9 - . _ ~ is
// %XX with upper-case hex; '/' kept in paths only.
function awsEncode(s, keepSlash) {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(b);
    if (/[A-Za-z0-9\-._~]/.test(c) || (keepSlash && c === '/')) out += c;
    else out += '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

function decode(s) {
  // S3 query strings use %20 for spaces; '+' is a literal plus.
  return decodeURIComponent(s);
}

function canonicalUri(rawPath) {
  // S3 does not normalise the path and encodes it once.
  return rawPath.split('/').map(seg => awsEncode(decode(seg), false)).join('/') || '/';
}

function canonicalQuery(rawQuery) {
  if (!rawQuery) return '';
  const pairs = rawQuery
    .split('&')
    .filter(p => p.length > 0)
    .map(p => {
      const i = p.indexOf('=');
      const k = i < 0 ? p : p.slice(0, i);
      const v = i < 0 ? '' : p.slice(i + 1);
      return [awsEncode(decode(k), false), awsEncode(decode(v), false)];
    });
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  return pairs.map(([k, v]) => `${k}=${v}`).join('&');
}

function hmac(key, data) {
  return crypto.createHmac('sha256', key).update(data, 'utf8').digest();
}

function sha256Hex(data) {
  return crypto.createHash('sha256').update(data).digest('hex');
}

// Returns null when the request is authentic, else [status, code, message].
function verify(req, rawPath, rawQuery, body) {
  const auth = req.headers['authorization'];
  if (!auth) return [403, 'AccessDenied', 'Anonymous access is not allowed'];
  const m = /^AWS4-HMAC-SHA256 Credential=([^,\s]+),\s*SignedHeaders=([^,\s]+),\s*Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) return [400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed'];
  const [, credential, signedHeadersText, signature] = m;
  const scopeParts = credential.split('/');
  if (scopeParts.length !== 5 || scopeParts[3] !== 's3' || scopeParts[4] !== 'aws4_request')
    return [400, 'AuthorizationHeaderMalformed', `bad credential scope ${credential}`];
  const [accessKey, date, region] = scopeParts;
  const account = ACCOUNTS[accessKey];
  if (!account)
    return [403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.'];

  const amzDate = req.headers['x-amz-date'];
  if (!amzDate || !/^\d{8}T\d{6}Z$/.test(amzDate)) return [403, 'AccessDenied', 'missing or malformed x-amz-date'];
  if (amzDate.slice(0, 8) !== date) return [403, 'SignatureDoesNotMatch', 'credential date differs from x-amz-date'];
  const when = Date.UTC(+amzDate.slice(0, 4), +amzDate.slice(4, 6) - 1, +amzDate.slice(6, 8),
    +amzDate.slice(9, 11), +amzDate.slice(11, 13), +amzDate.slice(13, 15));
  if (Math.abs(Date.now() - when) > MAX_SKEW_MS)
    return [403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.'];

  const payloadHash = req.headers['x-amz-content-sha256'];
  if (!payloadHash) return [400, 'InvalidRequest', 'Missing required header for this request: x-amz-content-sha256'];
  if (payloadHash !== 'UNSIGNED-PAYLOAD') {
    if (!/^[0-9a-f]{64}$/.test(payloadHash))
      return [400, 'InvalidArgument', 'x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a lower-case sha256 value'];
    const actual = sha256Hex(body);
    if (actual !== payloadHash)
      return [400, 'XAmzContentSHA256Mismatch', `The provided 'x-amz-content-sha256' header does not match what was computed (${actual}).`];
  }

  const signed = signedHeadersText.split(';');
  const sorted = [...signed].sort();
  if (signed.join(';') !== sorted.join(';') || signed.some(h => h !== h.toLowerCase()))
    return [403, 'SignatureDoesNotMatch', 'SignedHeaders not lower-case and sorted'];
  if (!signed.includes('host')) return [403, 'SignatureDoesNotMatch', 'host header not signed'];
  for (const h of Object.keys(req.headers)) {
    if (h.startsWith('x-amz-') && !signed.includes(h))
      return [403, 'AccessDenied', `There were headers present in the request which were not signed: ${h}`];
  }
  if (account.token !== null && req.headers['x-amz-security-token'] !== account.token)
    return [403, 'InvalidToken', 'The provided token is malformed or otherwise invalid.'];

  const canonicalHeaders = signed
    .map(h => {
      const v = req.headers[h];
      if (v === undefined) return null;
      const value = Array.isArray(v) ? v.join(',') : v;
      return `${h}:${value.trim().replace(/\s+/g, ' ')}\n`;
    });
  if (canonicalHeaders.includes(null)) return [403, 'SignatureDoesNotMatch', 'a signed header is missing'];

  const canonicalRequest = [
    req.method,
    canonicalUri(rawPath),
    canonicalQuery(rawQuery),
    canonicalHeaders.join(''),
    signedHeadersText,
    payloadHash,
  ].join('\n');
  const scope = `${date}/${region}/s3/aws4_request`;
  const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256Hex(canonicalRequest)].join('\n');
  let key = hmac('AWS4' + account.secret, date);
  key = hmac(key, region);
  key = hmac(key, 's3');
  key = hmac(key, 'aws4_request');
  const expected = crypto.createHmac('sha256', key).update(stringToSign, 'utf8').digest('hex');
  if (!crypto.timingSafeEqual(Buffer.from(expected), Buffer.from(signature)))
    return [403, 'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. ' +
      `Canonical request: ${JSON.stringify(canonicalRequest)}`];
  return null;
}

// The documented example of the S3 SigV4 guide (GET object with a Range),
// so the verifier itself is known to be right before any client relies on it.
function selfTest() {
  const req = {
    method: 'GET',
    headers: {
      host: 'examplebucket.s3.amazonaws.com',
      range: 'bytes=0-9',
      'x-amz-content-sha256': sha256Hex(''),
      'x-amz-date': '20130524T000000Z',
      authorization:
        'AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,' +
        'SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,' +
        'Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41',
    },
  };
  ACCOUNTS.AKIAIOSFODNN7EXAMPLE = { secret: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY', token: null };
  const realNow = Date.now;
  Date.now = () => Date.UTC(2013, 4, 24);
  try {
    const r = verify(req, '/test.txt', '', Buffer.alloc(0));
    if (r !== null) throw new Error(`SigV4 verifier self-test failed: ${r.join(' ')}`);
  } finally {
    Date.now = realNow;
    delete ACCOUNTS.AKIAIOSFODNN7EXAMPLE;
  }
}

async function main() {
  const args = parseArgs(process.argv);
  selfTest();
  fs.mkdirSync(args.dir, { recursive: true });
  const backend = new S3rver({
    address: '127.0.0.1',
    port: 0,
    directory: args.dir,
    silent: true,
    // <bucket>.s3.localhost is virtual-hosted; s3.localhost and
    // 127.0.0.1 are path-style.
    serviceEndpoint: 'localhost',
    vhostBuckets: true,
  });
  const backendAddr = await backend.run();

  const log = [];
  let failures = []; // {count, status, code, match}

  // s3rver 3.7.1 stores an object as several files written without a lock:
  // a PUT of a key while another request on that key runs can leave both
  // without an answer, or fail with 500 (eight concurrent PUT+GET pairs on
  // one key do it). S3 makes a PUT atomic, so the front hands the backend
  // one request per object at a time; other objects are not held up.
  const busy = new Map(); // "host path" -> promise of the last queued request
  const oneAtATime = (key, run) => {
    const next = (busy.get(key) || Promise.resolve()).then(() => new Promise(run));
    busy.set(key, next);
    next.then(() => {
      if (busy.get(key) === next) busy.delete(key);
    });
  };

  const front = http.createServer((req, res) => {
    const q = req.url.indexOf('?');
    const rawPath = q < 0 ? req.url : req.url.slice(0, q);
    const rawQuery = q < 0 ? '' : req.url.slice(q + 1);

    if (rawPath.startsWith('/__s3test/')) {
      const params = new URLSearchParams(rawQuery);
      req.resume();
      if (rawPath === '/__s3test/fail' && req.method === 'POST') {
        failures.push({
          count: Number(params.get('count') || '1'),
          status: Number(params.get('status') || '503'),
          code: params.get('code') || null,
          match: params.get('match') || '',
        });
        res.writeHead(204).end();
      } else if (rawPath === '/__s3test/log' && req.method === 'GET') {
        const body = JSON.stringify(log);
        res.writeHead(200, { 'Content-Type': 'application/json' }).end(body);
      } else if (rawPath === '/__s3test/reset' && req.method === 'POST') {
        log.length = 0;
        failures = [];
        res.writeHead(204).end();
      } else {
        res.writeHead(404).end();
      }
      return;
    }

    const chunks = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', c => {
      size += c.length;
      if (size > MAX_BODY) tooLarge = true;
      else chunks.push(c);
    });
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const entry = {
        method: req.method,
        host: req.headers.host,
        path: rawPath,
        query: rawQuery,
        length: body.length,
        status: 0,
        code: null,
        security_token: req.headers['x-amz-security-token'] || null,
        body: body.length <= 4096 && /xml/.test(req.headers['content-type'] || '') ? body.toString('utf8') : null,
      };
      log.push(entry);
      if (log.length > MAX_LOG) log.shift();
      const answer = (status, code, message) => {
        entry.status = status;
        entry.code = code;
        sendError(res, status, code, message);
      };
      if (tooLarge) return answer(400, 'EntityTooLarge', 'test server body limit');
      const bad = verify(req, rawPath, rawQuery, body);
      if (bad) return answer(...bad);

      const line = `${req.method} ${rawPath}?${rawQuery}`;
      const f = failures.find(x => x.count > 0 && line.includes(x.match));
      if (f) {
        f.count--;
        if (f.status === 0) {
          entry.status = 0;
          req.socket.destroy();
          return undefined;
        }
        const code = f.code || (f.status === 503 ? 'SlowDown' : f.status >= 500 ? 'InternalError' : 'InvalidRequest');
        return answer(f.status, code, 'injected by the test');
      }

      // s3rver 3.7.1 has no AbortMultipartUpload; answer it as S3 does.
      if (req.method === 'DELETE' && /(^|&)uploadId=/.test(rawQuery)) {
        entry.status = 204;
        res.writeHead(204).end();
        return undefined;
      }

      // Authentication is done: the backend sees an anonymous request
      // (s3rver skips its own checks when there is no Authorization).
      const headers = { ...req.headers };
      delete headers.authorization;
      delete headers['transfer-encoding'];
      headers['content-length'] = String(body.length);
      oneAtATime(`${req.headers.host} ${rawPath}`, done => {
        res.on('close', done);
        const up = http.request(
          { host: '127.0.0.1', port: backendAddr.port, method: req.method, path: req.url, headers },
          upRes => {
            entry.status = upRes.statusCode;
            res.writeHead(upRes.statusCode, upRes.headers);
            upRes.pipe(res);
          },
        );
        up.on('error', err => answer(500, 'InternalError', `backend: ${err.message}`));
        up.end(body);
      });
      return undefined;
    });
  });
  await new Promise((resolve, reject) => {
    front.once('error', reject);
    front.listen(args.port, '127.0.0.1', resolve);
  });
  const port = front.address().port;
  const tmp = `${args.readyFile}.tmp`;
  fs.writeFileSync(tmp, `${port}\n`);
  fs.renameSync(tmp, args.readyFile);
  process.stdout.write(`sigv4-front listening on 127.0.0.1:${port} (s3rver on ${backendAddr.port}, data ${path.resolve(args.dir)})\n`);

  const stop = () => {
    front.close();
    backend.close().finally(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch(err => {
  process.stderr.write(`sigv4-front: ${err.stack || err}\n`);
  process.exit(1);
});
