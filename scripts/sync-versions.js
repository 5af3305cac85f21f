#!/usr/bin/env node
'use strict'
// Keeps the platform packages in step with the root package: run by
// `npm version` (after `napi version`, which sets npm/*/package.json) so the
// root's exact-version optionalDependencies follow too.
const fs = require('fs')
const path = require('path')

const root = path.join(__dirname, '..')
const pkgPath = path.join(root, 'package.json')
const pkg = JSON.parse(fs.readFileSync(pkgPath, 'utf8'))
const names = fs.readdirSync(path.join(root, 'npm')).map((d) => JSON.parse(fs.readFileSync(path.join(root, 'npm', d, 'package.json'), 'utf8')).name)
pkg.optionalDependencies = Object.fromEntries(names.sort().map((n) => [n, pkg.version]))
fs.writeFileSync(pkgPath, JSON.stringify(pkg, null, 2) + '\n')
console.log(`optionalDependencies set to ${pkg.version}: ${names.join(', ')}`)
