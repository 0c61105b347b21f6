// SPDX-License-Identifier: MIT
// legacy_check.js - checks that a server answers the original semaphore service's five legacy routes (create, up,
// down, value, delete) as the seed documents them; the same check runs against the Node-RED
// flow and against semad before either is measured.
//
// Usage: node legacy_check.js HOST:PORT   (prints "routes ok" or the first difference, exit 1)
'use strict';

const http = require('http');

function request(port, method, p, body, host = '127.0.0.1') {
    return new Promise((resolve, reject) => {
        const data = body === undefined ? null : JSON.stringify(body);
        const headers = data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {};
        const req = http.request({ host, port, method, path: p, headers }, (res) => {
            let b = '';
            res.on('data', (c) => (b += c));
            res.on('end', () => resolve({ status: res.statusCode, body: b }));
        });
        req.on('error', reject);
        req.end(data);
    });
}

// The five routes with the answers the seed documents; throws on the first difference.
async function checkRoutes(port, host = '127.0.0.1') {
    const name = `check-${process.pid}`;
    const steps = [
        ['POST', '/semaphore', { name, value: 2 }, 200, (b) => JSON.parse(b).value === 2],
        ['POST', '/semaphore', { name, value: 2 }, 303, null],
        ['POST', '/semaphore/down', { name }, 200, (b) => JSON.parse(b).value === 1],
        ['POST', '/semaphore/down', { name }, 200, (b) => JSON.parse(b).value === 0],
        ['POST', '/semaphore/down', { name }, 409, (b) => b.includes('Semaphore locked')],
        ['POST', '/semaphore/up', { name }, 200, (b) => JSON.parse(b).value === 1],
        ['GET', `/semaphore/value/${name}`, undefined, 200, (b) => JSON.parse(b).value === 1],
        ['GET', '/semaphore/value/no-such-sem', undefined, 404, null],
        ['POST', '/semaphore/up', { name: 'no-such-sem' }, 404, null],
        ['DELETE', `/semaphore/${name}`, { name }, 200, null],
        ['GET', `/semaphore/value/${name}`, undefined, 404, null],
        ['DELETE', `/semaphore/${name}`, { name }, 404, null],
    ];
    for (const [method, p, body, status, ok] of steps) {
        const r = await request(port, method, p, body, host);
        if (r.status !== status || (ok && !ok(r.body)))
            throw new Error(`${method} ${p}: got ${r.status} ${r.body.slice(0, 200)}, want ${status}`);
    }
}

module.exports = { checkRoutes, request };

if (require.main === module) {
    const m = /^([^:]+):(\d+)$/.exec(process.argv[2] || '');
    if (!m) {
        console.error('usage: node legacy_check.js HOST:PORT');
        process.exit(2);
    }
    checkRoutes(Number(m[2]), m[1]).then(
        () => console.log('routes ok'),
        (e) => {
            console.error(`legacy_check.js: ${e.message}`);
            process.exit(1);
        }
    );
}
