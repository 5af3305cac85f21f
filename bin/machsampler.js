#!/usr/bin/env node
'use strict'
// The `machsampler` command (package.json "bin"); see lib/cli.js.
require('../lib/cli.js').main(process.argv.slice(2))
