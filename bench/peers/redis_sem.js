// SPDX-License-Identifier: MIT
// redis_sem.js - acquire+release pairs/s of redis-semaphore (its Semaphore class on ioredis)
// against a real redis-server: N concurrent async loops, each acquire then release, counted
// for a fixed time; checks its own results and prints one JSON line.
//
// Usage: node redis_sem.js --redis HOST:PORT [-c N] [-d SECS] [--limit L] [--retry MS]
//                          [--shared] [--key NAME]
//   -c N        concurrent loops (default 50), each with its own connection unless --shared
//   -d SECS     measured seconds (default 2), after a 0.3 s warm-up
//   --limit L   the semaphore's limit (default: N, so no loop waits, as `sema bench -m pairs`)
//   --retry MS  redis-semaphore's retryInterval: how long a refused acquire sleeps before it
//               polls again (default: the library's, 10 ms)
// Output fields: pairs, pairs_per_s, requests (two Redis commands per pair), requests_per_s,
// p50_us/p99_us (per Redis command, estimated as half a pair), pair_p50_us, pair_p99_us,
// errors, left_in_redis (members left in the semaphore's sorted set after the run: 0),
// generator_cpu_us_per_request (this process).
'use strict';

const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');

function opts(argv) {
    const o = { redis: '', conns: 50, secs: 2, limit: 0, retry: undefined, shared: false, key: `bench-${process.pid}` };
    const take = { '--redis': 'redis', '-c': 'conns', '-d': 'secs', '--limit': 'limit', '--retry': 'retry', '--key': 'key' };
    for (let i = 2; i < argv.length; i++) {
        if (argv[i] === '--shared') o.shared = true;
        else if (take[argv[i]] && i + 1 < argv.length) o[take[argv[i]]] = argv[++i];
        else throw new Error(`unknown or incomplete argument ${argv[i]}`);
    }
    for (const k of ['conns', 'secs', 'limit', 'retry'])
        if (o[k] !== undefined) o[k] = Number(o[k]);
    if (!/^[^:]+:\d+$/.test(o.redis)) throw new Error('--redis HOST:PORT is required');
    if (!(o.conns >= 1 && o.conns <= 10000) || !(o.secs > 0 && o.secs <= 600))
        throw new Error('-c must be 1..10000 and -d 0..600');
    if (!o.limit) o.limit = o.conns;
    return o;
}

function percentile(sorted, q) {
    return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : 0;
}

function connect(addr) {
    const [host, port] = addr.split(':');
    return new Redis({ host, port: Number(port), lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: true });
}

// One loop: acquire, count, release, until the clock says stop; pair latencies in µs.
async function loop(sem, st, lat) {
    while (!st.stop) {
        const t0 = process.hrtime.bigint();
        try {
            await sem.acquire();
            await sem.release();
        } catch (e) {
            st.errors++;
            if (!st.firstError) st.firstError = String(e && e.message);
            continue;
        }
        if (st.measuring) {
            st.pairs++;
            lat.push(Number(process.hrtime.bigint() - t0) / 1000);
        }
    }
}

async function main() {
    const o = opts(process.argv);
    const clients = [];
    for (let i = 0; i < (o.shared ? 1 : o.conns); i++) clients.push(connect(o.redis));
    await Promise.all(clients.map((c) => c.connect()));
    await clients[0].del(`semaphore:${o.key}`);
    const semOpts = { acquireTimeout: 30000, lockTimeout: 10000 };
    if (o.retry !== undefined) semOpts.retryInterval = o.retry;
    const st = { stop: false, measuring: false, pairs: 0, errors: 0, firstError: '' };
    const lat = [];
    const loops = [];
    for (let i = 0; i < o.conns; i++)
        loops.push(loop(new Semaphore(clients[i % clients.length], o.key, o.limit, semOpts), st, lat));

    await new Promise((r) => setTimeout(r, 300));
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    st.measuring = true;
    await new Promise((r) => setTimeout(r, o.secs * 1000));
    st.measuring = false;
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu = process.cpuUsage(cpu0);
    st.stop = true;
    await Promise.all(loops);
    const left = await clients[0].zcard(`semaphore:${o.key}`);
    await clients[0].del(`semaphore:${o.key}`);
    await Promise.all(clients.map((c) => c.quit()));

    lat.sort((a, b) => a - b);
    const requests = 2 * st.pairs;
    const out = {
        peer: 'redis-semaphore', connections: clients.length, loops: o.conns, limit: o.limit,
        retry_interval_ms: o.retry === undefined ? 10 : o.retry, seconds: Number(secs.toFixed(3)),
        pairs: st.pairs, pairs_per_s: Math.round(st.pairs / secs), requests,
        requests_per_s: Math.round(requests / secs),
        p50_us: Number((percentile(lat, 0.5) / 2).toFixed(1)), p99_us: Number((percentile(lat, 0.99) / 2).toFixed(1)),
        pair_p50_us: Number(percentile(lat, 0.5).toFixed(1)), pair_p99_us: Number(percentile(lat, 0.99).toFixed(1)),
        errors: st.errors, left_in_redis: left,
        generator_cpu_us_per_request: requests ? Number(((cpu.user + cpu.system) / requests).toFixed(2)) : null,
    };
    if (st.firstError) out.first_error = st.firstError;
    console.log(JSON.stringify(out));
    const bad = st.pairs === 0 || st.errors > 0 || left !== 0;
    process.exit(bad ? 1 : 0);
}

main().catch((e) => {
    console.error(`redis_sem.js: ${e.message}`);
    process.exit(1);
});
