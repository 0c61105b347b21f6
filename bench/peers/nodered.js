// SPDX-License-Identifier: MIT
// nodered.js - runs the original semaphore service's Node-RED flow headless on an ephemeral loopback port:
// extracts the flow JSON from the seed document at run time, deploys it in an embedded
// Node-RED (no editor, no admin API, user dir in a temp dir) and prints "listening ADDR".
//
// Usage: node nodered.js [--seeds DIR] [--check]
//   --seeds DIR  where 001_*.txt is (default $SEMA_SEEDS or ../shared/seeds from the repo root)
//   --check      also check the five routes (create, up, down, value, delete), print "routes ok"
// Stops on SIGTERM/SIGINT and removes its temp dir.
'use strict';

const fs = require('fs');
const http = require('http');
const { checkRoutes, request } = require('./legacy_check');
const os = require('os');
const path = require('path');

const SUBFLOW_ID = '3fd93e9558924dee';

function arg(name, def) {
    const i = process.argv.indexOf(name);
    return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

// The seed document is a web page around the exported JSON array; the array is the text from
// the first line that is "[" to the last "]".
function extractFlow(seedsDir) {
    const file = fs.readdirSync(seedsDir).find((f) => /^001_.*\.txt$/.test(f));
    if (!file) throw new Error(`no 001_*.txt in ${seedsDir}`);
    const text = fs.readFileSync(path.join(seedsDir, file), 'utf8');
    const start = text.search(/^\[\s*$/m);
    const end = text.lastIndexOf(']');
    if (start < 0 || end < start) throw new Error(`no flow JSON array in ${file}`);
    const flow = JSON.parse(text.slice(start, end + 1));
    if (!flow.some((n) => n.id === SUBFLOW_ID && n.type === 'subflow'))
        throw new Error(`${file}: subflow ${SUBFLOW_ID} missing`);
    if (!flow.some((n) => n.type === `subflow:${SUBFLOW_ID}`))
        throw new Error(`${file}: no instance of subflow ${SUBFLOW_ID}`);
    return addMissingTabs(flow);
}

// The export holds the nodes of its tab but not the tab itself: declare every tab that a
// node lives on and that is neither a tab nor a subflow of the export.
function addMissingTabs(flow) {
    const known = new Set(flow.filter((n) => n.type === 'tab' || n.type === 'subflow').map((n) => n.id));
    const tabs = new Set(flow.filter((n) => n.z && !known.has(n.z)).map((n) => n.z));
    for (const id of tabs) flow.unshift({ id, type: 'tab', label: 'seed 001', disabled: false, info: '' });
    return flow;
}

async function main() {
    const root = path.resolve(__dirname, '..', '..');
    const seeds = arg('--seeds', process.env.SEMA_SEEDS || path.join(root, '..', 'shared', 'seeds'));
    const flow = extractFlow(seeds);
    const userDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sema-nodered.'));
    fs.writeFileSync(path.join(userDir, 'flows.json'), JSON.stringify(flow));
    const cleanup = () => fs.rmSync(userDir, { recursive: true, force: true });

    const RED = require('node-red');
    // Node-RED's HTTP-in routes are an app mounted at the root of our own server.
    const server = http.createServer((req, res) => RED.httpNode(req, res));
    const settings = {
        userDir,
        flowFile: 'flows.json',
        httpAdminRoot: false,
        httpNodeRoot: '/',
        uiPort: 0,
        uiHost: '127.0.0.1',
        credentialSecret: false,
        disableEditor: true,
        externalModules: { autoInstall: false },
        logging: { console: { level: 'warn', metrics: false, audit: false } },
        functionGlobalContext: {},
    };
    RED.init(server, settings);
    const stop = () => {
        Promise.resolve(RED.stop()).catch(() => {}).finally(() => {
            server.close();
            cleanup();
            process.exit(0);
        });
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    try {
        await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
        await RED.start();
        const port = server.address().port;
        // RED.start resolves before the flows run; wait for the routes to answer.
        for (let i = 0; ; i++) {
            const r = await request(port, 'GET', '/semaphore/value/startup-probe');
            if (r.status === 404 && r.body.includes('semaphore not found')) break;
            if (i === 100) throw new Error(`the flow does not answer after 10 s (${r.status} ${r.body.slice(0, 100)})`);
            await new Promise((res) => setTimeout(res, 100));
        }
        if (process.argv.includes('--check')) {
            await checkRoutes(port);
            console.log('routes ok');
        }
        console.log(`listening 127.0.0.1:${port}`);
    } catch (e) {
        console.error(`nodered.js: ${e.message}`);
        cleanup();
        process.exit(1);
    }
}

main().catch((e) => {
    console.error(`nodered.js: ${e.message}`);
    process.exit(1);
});
