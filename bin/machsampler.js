#!/usr/bin/env node
'use strict'
// The `machsampler` command (package.json "bin"); see lib/cli/main.js.
require('../lib/cli/main.js').main(process.argv.slice(2))
