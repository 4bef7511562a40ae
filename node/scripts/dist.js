'use strict'
// `make dist-node` (mk/dist-pynode.mk): the npm tarballs, the napi-rs way.
//
//   node scripts/dist.js <addon dir> <out dir>
//
// <addon dir> holds the addons `napi build --platform` made (accord.<platform>.node). For every
// per-platform package under npm/ (npm/<platform>/package.json, made by `napi create-npm-dirs`
// from napi.targets) whose addon is there, this packs that package with its addon, and lists it
// in the main package's optionalDependencies at the same version; npm then installs the one
// whose os/cpu/libc match the machine, and index.js loads it. The main package carries no addon.
// This is what `napi pre-publish` does before `npm publish`, minus the publishing: the tarballs
// are made from copies in <addon dir>/stage, so node/ is left as it is.
//
// Every package must carry the main package's version (one version for every artifact), and
// the main package's files must be the committed index.js and index.d.ts that this build
// generated again (<addon dir> holds the generated ones too).

const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const PACKAGE_DIR = path.resolve(__dirname, '..')
const REPO_DIR = path.resolve(PACKAGE_DIR, '..')
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'

function fail(message) {
  console.error(`dist-node: ${message}`)
  process.exit(1)
}

const [addonDir, outDir] = process.argv.slice(2).map((p) => path.resolve(p))
if (!addonDir || !outDir) fail('usage: node scripts/dist.js <addon dir> <out dir>')

const readJson = (file) => JSON.parse(fs.readFileSync(file, 'utf8'))
const main = readJson(path.join(PACKAGE_DIR, 'package.json'))
const { version } = main
const binaryName = main.napi.binaryName

// The generated loader and types must be the committed ones (the same check as test-node's).
for (const file of ['index.js', 'index.d.ts']) {
  const generated = path.join(addonDir, file)
  if (!fs.existsSync(generated)) fail(`${generated} is missing: napi build did not write it`)
  if (fs.readFileSync(generated, 'utf8') !== fs.readFileSync(path.join(PACKAGE_DIR, file), 'utf8')) {
    fail(`node/${file} is stale: run \`npm run build\` in node/ and commit it`)
  }
}

const stageRoot = path.join(addonDir, 'stage')
fs.rmSync(stageRoot, { recursive: true, force: true })
fs.mkdirSync(stageRoot, { recursive: true })
const license = path.join(REPO_DIR, 'LICENSE')

function pack(dir) {
  const [packed] = JSON.parse(
    execFileSync(npm, ['pack', '--json', '--pack-destination', outDir, '--loglevel=error'], {
      cwd: dir,
      encoding: 'utf8',
    }),
  )
  console.log(`dist-node: ${path.join(path.relative(REPO_DIR, outDir), packed.filename)}`)
  return packed
}

const optionalDependencies = {}
for (const platform of fs.readdirSync(path.join(PACKAGE_DIR, 'npm')).sort()) {
  const dir = path.join(PACKAGE_DIR, 'npm', platform)
  const pkg = readJson(path.join(dir, 'package.json'))
  if (pkg.version !== version) {
    fail(`npm/${platform}/package.json has version ${pkg.version}, the package ${version}`)
  }
  if (pkg.name !== `${main.name}-${platform}`) {
    fail(`npm/${platform}/package.json is named ${pkg.name}, not ${main.name}-${platform}`)
  }
  const addon = path.join(addonDir, `${binaryName}.${platform}.node`)
  if (pkg.main !== path.basename(addon)) fail(`npm/${platform}/package.json: main is not ${path.basename(addon)}`)
  if (!fs.existsSync(addon)) {
    console.log(`dist-node: ${pkg.name} skipped: no addon built for ${platform} here`)
    continue
  }
  const stage = path.join(stageRoot, platform)
  fs.cpSync(dir, stage, { recursive: true })
  fs.copyFileSync(addon, path.join(stage, path.basename(addon)))
  if (fs.existsSync(license)) fs.copyFileSync(license, path.join(stage, 'LICENSE'))
  const packed = pack(stage)
  if (!packed.files.some((f) => f.path === path.basename(addon))) fail(`${packed.filename} lacks its addon`)
  optionalDependencies[pkg.name] = version
}
if (Object.keys(optionalDependencies).length === 0) fail(`no addon in ${addonDir}`)

// The main package: exactly the files `npm pack` takes from node/, plus the optionalDependencies.
const [listed] = JSON.parse(
  execFileSync(npm, ['pack', '--dry-run', '--json', '--loglevel=error'], { cwd: PACKAGE_DIR, encoding: 'utf8' }),
)
const stage = path.join(stageRoot, 'main')
for (const { path: file } of listed.files) {
  if (file.endsWith('.node')) fail(`the main package would ship ${file}: addons go in npm/<platform>`)
  fs.mkdirSync(path.dirname(path.join(stage, file)), { recursive: true })
  fs.copyFileSync(path.join(PACKAGE_DIR, file), path.join(stage, file))
}
if (fs.existsSync(license)) fs.copyFileSync(license, path.join(stage, 'LICENSE'))
const staged = readJson(path.join(stage, 'package.json'))
staged.optionalDependencies = { ...staged.optionalDependencies, ...optionalDependencies }
fs.writeFileSync(path.join(stage, 'package.json'), `${JSON.stringify(staged, null, 2)}\n`)
pack(stage)
