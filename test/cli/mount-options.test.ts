// mount(8)'s option lists (`redirfs mount -o`), read as mount(8) reads
// them, against a command's own options. Through mount(8) and fstab for
// real: test/mount-scripts/fstab.test.ts.
import { Command, Option } from 'commander'
import t from 'tap'
import { expandOptionLists, flagsOfOptionList, splitOptionList } from '../../src/cli/mount-options'
import { UsageError } from '../../src/errors'

const command = new Command('mount')
  .option('--memory <size>')
  .option('--chunk-size <K>')
  .option('--extensions <list>')
  .option('--allow-other')
  .option('--foreground')
  .option('--no-prefetch')
  .addOption(new Option('--secret <x>').hideHelp())

t.test('commas inside double quotes belong to the value, and the quotes go', async t => {
  t.same(splitOptionList('memory=1G,extensions="jpg,png",allow_other,,peers="a:1,b:2"'), [
    { name: 'memory', value: '1G' }, { name: 'extensions', value: 'jpg,png' }, { name: 'allow_other' }, { name: 'peers', value: 'a:1,b:2' }
  ])
  t.same(splitOptionList('include=a=b'), [{ name: 'include', value: 'a=b' }], 'only the first = splits')
  t.throws(() => splitOptionList('extensions="jpg,png'), new UsageError('-o extensions="jpg,png: a double quote is not closed'))
})

t.test('each option becomes one argument of the flag it names; mount(8)\'s own are left out', async t => {
  t.same(flagsOfOptionList(command, 'rw,noatime,_netdev,x-systemd.automount,memory=1G,chunk_size=4,extensions="jpg,png",allow_other,no_prefetch'),
    ['--memory=1G', '--chunk-size=4', '--extensions=jpg,png', '--allow-other', '--no-prefetch'])
  t.same(flagsOfOptionList(command, 'memory=-5'), ['--memory=-5'], 'a value that looks like a flag stays the value')
})

t.test('a name the command does not have, or a flag in disguise, is refused in one line', async t => {
  for (const [list, message] of [
    ['=x', '-o =…: redirfs mount has no such option (names are those of redirfs mount --help, underscores for dashes)'],
    ['--', '-o --: redirfs mount has no such option (names are those of redirfs mount --help, underscores for dashes)'],
    ['-V', '-o -V: redirfs mount has no such option (names are those of redirfs mount --help, underscores for dashes)'],
    ['secret=1', '-o secret=…: redirfs mount has no such option (names are those of redirfs mount --help, underscores for dashes)'],
    ['allow_other=yes', '-o allow_other: takes no value (give it bare, as allow_other)'],
    ['memory', '-o memory: needs a value (memory=…)'],
    ['foreground', '-o foreground: a mount by mount(8) runs in the background (leave foreground out)']
  ]) t.throws(() => flagsOfOptionList(command, list), new UsageError(message), list)
})

t.test('-o lists of the command are expanded up to --; elsewhere argv is left alone', async t => {
  t.same(expandOptionLists(['node', 'redirfs', 'mount', '-o', 'memory=1G', '-ochunk_size=4', '--', '-o', 'x'], command),
    ['node', 'redirfs', 'mount', '--memory=1G', '--chunk-size=4', '--', '-o', 'x'])
  t.same(expandOptionLists(['node', 'redirfs', 'pack', '-o', 'x'], command), ['node', 'redirfs', 'pack', '-o', 'x'])
  t.throws(() => expandOptionLists(['node', 'redirfs', 'mount', '-o'], command), new UsageError('-o needs a list of options, e.g. -o memory=32G,chunk_size=64'))
})
