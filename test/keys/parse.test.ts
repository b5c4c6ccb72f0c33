import t from 'tap'
import {
  InvalidRequest,
  assertionSubject,
  basicClientId,
  checkKey,
  declaredClientId,
  sourceKey
} from '../../lib/keys/parse.js'

/** An HTTP Basic Authorization header whose decoded credentials are `credentials` as written. */
function basic (credentials: string, scheme = 'Basic'): string {
  return `${scheme} ${Buffer.from(credentials, 'utf8').toString('base64')}`
}

/** An unsigned-looking JWT (header.payload.signature) whose payload is `payload` as written. */
function jwtWithPayload (payload: string): string {
  const part = (text: string): string => Buffer.from(text, 'utf8').toString('base64url')
  return `${part('{"alg":"RS256","typ":"JWT"}')}.${part(payload)}.c2lnbmF0dXJl`
}

/** A JWT whose claims are `claims`. */
function jwt (claims: unknown): string {
  return jwtWithPayload(JSON.stringify(claims))
}

const MAX = 255

/** The message of the InvalidRequest that `fn` throws, or '(accepted)' when it throws none. */
function refusalOf (fn: () => unknown): string {
  try {
    fn()
  } catch (err) {
    if (err instanceof InvalidRequest) return err.message
    throw err
  }
  return '(accepted)'
}

t.test('InvalidRequest is an Error named InvalidRequest whose message is the description', async t => {
  const err = new InvalidRequest('client_id is repeated')
  t.ok(err instanceof Error)
  t.equal(err.name, 'InvalidRequest')
  t.equal(err.message, 'client_id is repeated')
})

t.test('checkKey', async t => {
  t.test('returns a valid key unchanged', async t => {
    t.equal(checkKey('client-1', 'client_id', MAX), 'client-1')
    t.equal(checkKey('x'.repeat(MAX), 'client_id', MAX), 'x'.repeat(MAX), 'exactly maxLength')
    t.equal(checkKey('clïent 名', 'client_id', MAX), 'clïent 名', 'non-ASCII printable characters')
    // The printable characters on either side of each control range.
    for (const edge of [' ', '~', '\u00a0']) t.equal(checkKey(`a${edge}b`, 'client_id', MAX), `a${edge}b`, JSON.stringify(edge))
  })

  t.test('refuses what a pace must not store, naming the source', async t => {
    // Each row: the value, the error message.
    const table: Array<[unknown, string]> = [
      [5, 'client_id must be a string'],
      [undefined, 'client_id must be a string'],
      ['', 'client_id must not be empty'],
      ['x'.repeat(MAX + 1), `client_id is longer than ${MAX} characters`],
      ['a\u0000b', 'client_id contains non-printable characters'], // C0
      ['a\nb', 'client_id contains non-printable characters'],
      ['a\u007fb', 'client_id contains non-printable characters'], // DEL
      ['a\u0085b', 'client_id contains non-printable characters'], // C1
      ['a\u001fb', 'client_id contains non-printable characters'], // the last of C0
      ['a\u009fb', 'client_id contains non-printable characters'], // the last of C1
      ['\u0000', 'client_id contains non-printable characters'] // the first character alone
    ]
    for (const [value, message] of table) {
      t.equal(refusalOf(() => checkKey(value, 'client_id', MAX)), message, JSON.stringify(value))
    }
  })
})

t.test('HTTP Basic', async t => {
  t.test('no Authorization header declares nothing', async t => {
    t.equal(basicClientId(undefined), undefined)
    t.equal(declaredClientId(undefined, undefined, MAX), undefined)
  })

  t.test('the client id is the username', async t => {
    t.equal(declaredClientId(basic('client-1:secret'), undefined, MAX), 'client-1')
  })

  t.test('only the first colon separates the id from the secret', async t => {
    t.equal(basicClientId(basic('client-1:se:cr:et')), 'client-1')
  })

  t.test('the secret is the handler\'s: not decoded, so one sent unencoded (a bare "%") still declares the id', async t => {
    t.equal(basicClientId(basic('client-1:50%off')), 'client-1')
    t.equal(basicClientId(basic('client-1:%')), 'client-1')
  })

  t.test('an empty secret is still Basic credentials', async t => {
    t.equal(basicClientId(basic('client-1:')), 'client-1')
  })

  t.test('the scheme name is case-insensitive', async t => {
    for (const scheme of ['Basic', 'basic', 'BASIC', 'bAsIc']) {
      t.equal(basicClientId(basic('client-1:secret', scheme)), 'client-1', scheme)
    }
  })

  t.test('spaces around the credentials are ignored', async t => {
    t.equal(basicClientId(`Basic   ${Buffer.from('client-1:s').toString('base64')}  `), 'client-1')
  })

  t.test('other schemes are not Basic and declare nothing', async t => {
    for (const header of ['Bearer abc.def.ghi', 'Digest username="x"', 'DPoP abc', 'Basicx abc', 'Negotiate', '']) {
      t.equal(basicClientId(header), undefined, JSON.stringify(header))
    }
  })

  t.test('the username is form-url-decoded (RFC 6749 2.3.1)', async t => {
    // Each row: the username as sent, the client id.
    const table: Array<[string, string]> = [
      ['my+client', 'my client'], // '+' is a space
      ['a%2Bb', 'a+b'], // an encoded '+' is a plus
      ['a+%2B', 'a +'], // '+' becomes a space before percent-decoding, not after
      ['a%3Ab', 'a:b'], // an encoded colon belongs to the id
      ['caf%C3%A9', 'café'],
      ['a%20b', 'a b'],
      ['%25', '%']
    ]
    for (const [username, id] of table) {
      t.equal(basicClientId(basic(`${username}:secret`)), id, username)
    }
  })

  t.test('malformed Basic credentials are an InvalidRequest', async t => {
    const notBase64 = 'Basic credentials are not valid base64'
    // Each row: the header, the message.
    const table: Array<[string, string]> = [
      ['Basic', notBase64], // no credentials at all
      ['Basic ', notBase64],
      ['Basic    ', notBase64],
      ['Basic !!!!', notBase64], // not the base64 alphabet
      ['Basic Y2xp ZW50', notBase64], // a space inside
      ['Basic Y2xpZW50OnM', notBase64], // unpadded: 'client:s' needs '='
      ['Basic Y2xpZW50OnM==', notBase64], // wrong padding
      ['Basic Y2xpZW50Om=', notBase64], // 11 characters: not whole groups of 4
      ['Basic Y2xpZW50OnM=Y2xp', notBase64], // padding in the middle
      ['Basic Y2xpZW50_nM=', notBase64], // base64url is not base64
      [basic('client-1'), 'Basic credentials lack the ":" between client id and secret'],
      [basic(''), notBase64], // encodes to nothing at all
      [basic(':secret'), 'the Basic client id must not be empty'],
      [basic('a%zz:secret'), 'the Basic client id has a malformed percent-encoding'],
      [basic('a%:secret'), 'the Basic client id has a malformed percent-encoding'],
      [basic('%C3:secret'), 'the Basic client id has a malformed percent-encoding'], // half a UTF-8 sequence
      [basic('a%00b:secret'), 'the Basic client id contains non-printable characters'],
      [basic('a%0Ab:secret'), 'the Basic client id contains non-printable characters'],
      [basic('a\u0001b:secret'), 'the Basic client id contains non-printable characters']
    ]
    for (const [header, message] of table) {
      t.equal(refusalOf(() => declaredClientId(header, undefined, MAX)), message, JSON.stringify(header))
    }
  })

  t.test('a Basic client id longer than maxLength is an InvalidRequest', async t => {
    t.equal(declaredClientId(basic('abcde:s'), undefined, 5), 'abcde')
    t.equal(refusalOf(() => declaredClientId(basic('abcdef:s'), undefined, 5)), 'the Basic client id is longer than 5 characters')
  })

  t.test('the length limit applies to the decoded id', async t => {
    t.equal(declaredClientId(basic('%61%62%63:s'), undefined, 3), 'abc')
  })
})

t.test('body client_id', async t => {
  t.test('a string client_id is the declared id', async t => {
    t.equal(declaredClientId(undefined, { grant_type: 'client_credentials', client_id: 'client-1' }, MAX), 'client-1')
  })

  t.test('a body without client_id declares nothing', async t => {
    t.equal(declaredClientId(undefined, {}, MAX), undefined)
    t.equal(declaredClientId(undefined, { grant_type: 'client_credentials' }, MAX), undefined)
    t.equal(declaredClientId(undefined, { client_id: undefined }, MAX), undefined)
  })

  t.test('the body value is taken as parsed, with no further decoding', async t => {
    t.equal(declaredClientId(undefined, { client_id: 'a+b%20c' }, MAX), 'a+b%20c')
  })

  t.test('a client_id that is not one valid string is an InvalidRequest', async t => {
    // Each row: client_id, the message.
    const table: Array<[unknown, string]> = [
      [['a', 'b'], 'client_id is repeated'], // ?client_id=a&client_id=b
      [['a', 'a'], 'client_id is repeated'], // even when both agree
      [[], 'client_id is repeated'],
      [42, 'client_id must be a string'],
      [true, 'client_id must be a string'],
      [null, 'client_id must be a string'],
      [{ id: 'a' }, 'client_id must be a string'], // JSON bodies can nest
      ['x'.repeat(MAX + 1), `client_id is longer than ${MAX} characters`],
      ['a\tb', 'client_id contains non-printable characters'],
      ['a\u009bb', 'client_id contains non-printable characters']
    ]
    for (const [clientId, message] of table) {
      t.equal(refusalOf(() => declaredClientId(undefined, { client_id: clientId }, MAX)), message, JSON.stringify(clientId))
    }
  })

  t.test('a body that is not a parsed object is not read: only Basic counts', async t => {
    const bodies: unknown[] = [
      null,
      undefined,
      'client_id=other', // an unparsed form
      Buffer.from('client_id=other'),
      42
    ]
    for (const body of bodies) {
      t.equal(declaredClientId(undefined, body, MAX), undefined, `no Basic, body ${String(body)}`)
      t.equal(declaredClientId(basic('client-1:s'), body, MAX), 'client-1', `Basic, body ${String(body)}`)
    }
  })

  t.test('a body object without a prototype is read', async t => {
    const body = Object.assign(Object.create(null) as Record<string, unknown>, { client_id: 'client-1' })
    t.equal(declaredClientId(undefined, body, MAX), 'client-1')
  })
})

t.test('client_assertion', async t => {
  t.test('the sub claim of a JWT is the declared id, decoded but not verified', async t => {
    const assertion = jwt({ iss: 'client-1', sub: 'client-1', aud: 'https://as.example/token', exp: 1 })
    t.equal(declaredClientId(undefined, { client_assertion: assertion }, MAX), 'client-1')
    t.equal(assertionSubject(assertion), 'client-1')
  })

  t.test('a sub with characters outside ASCII survives base64url and UTF-8', async t => {
    t.equal(assertionSubject(jwt({ sub: 'clïent-名-~?>' })), 'clïent-名-~?>')
  })

  t.test('the sub is not form-decoded', async t => {
    t.equal(assertionSubject(jwt({ sub: 'a+b%20' })), 'a+b%20')
  })

  t.test('an assertion that is not a JWT is an InvalidRequest', async t => {
    const payload = Buffer.from('{"sub":"a"}').toString('base64url')
    for (const assertion of [
      'not-a-jwt',
      'a.b', // two parts
      `h.${payload}.s.x`, // four parts
      `h.${payload}==.s`, // padding is not base64url
      'h.eyJzdWIiOiJhPyJ9+/.s', // '+' and '/' belong to base64, not base64url
      `h.${payload} .s`
    ]) {
      t.equal(refusalOf(() => assertionSubject(assertion)), 'client_assertion is not a JWT', assertion)
    }
  })

  t.test('an assertion whose payload is not JSON is an InvalidRequest', async t => {
    for (const payload of ['not json', '', '{"sub":', '\u00ff']) {
      t.equal(refusalOf(() => assertionSubject(jwtWithPayload(payload))), 'client_assertion has an unreadable payload', JSON.stringify(payload))
    }
  })

  t.test('an assertion without a string sub is an InvalidRequest', async t => {
    for (const payload of ['{}', '{"sub":5}', '{"sub":null}', '{"sub":["a"]}', 'null', '"client-1"', '["client-1"]', '7']) {
      t.equal(refusalOf(() => assertionSubject(jwtWithPayload(payload))), 'client_assertion has no string sub claim', payload)
    }
  })

  t.test('a client_assertion that is not a single string is an InvalidRequest', async t => {
    t.equal(refusalOf(() => declaredClientId(undefined, { client_assertion: 5 }, MAX)), 'client_assertion must be a single string')
    t.equal(refusalOf(() => declaredClientId(undefined, { client_assertion: null }, MAX)), 'client_assertion must be a single string')
    t.equal(refusalOf(() => declaredClientId(undefined, { client_assertion: [jwt({ sub: 'a' }), jwt({ sub: 'a' })] }, MAX)),
      'client_assertion is repeated')
  })

  t.test('an encrypted JWT (JWE, five parts) hides its sub: it declares nothing, and client_id names the client', async t => {
    const jwe = 'eyJhbGciOiJSU0EtT0FFUCIsImVuYyI6IkEyNTZHQ00ifQ.a2V5.aXY.Y2lwaGVy.dGFn'
    t.equal(assertionSubject(jwe), undefined)
    t.equal(declaredClientId(undefined, { client_assertion: jwe }, MAX), undefined)
    t.equal(declaredClientId(undefined, { client_id: 'client-1', client_assertion: jwe }, MAX), 'client-1')
  })

  t.test('only a JWT client assertion is read: another client_assertion_type (SAML, RFC 7522) declares nothing', async t => {
    const saml = Buffer.from('<saml:Assertion>...</saml:Assertion>').toString('base64url')
    const samlType = 'urn:ietf:params:oauth:client-assertion-type:saml2-bearer'
    const jwtType = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
    t.equal(declaredClientId(undefined, { client_id: 's6BhdRkqt3', client_assertion_type: samlType, client_assertion: saml }, MAX), 's6BhdRkqt3')
    t.equal(declaredClientId(undefined, { client_assertion_type: samlType, client_assertion: saml }, MAX), undefined)
    t.equal(declaredClientId(undefined, { client_assertion_type: jwtType, client_assertion: jwt({ sub: 'client-1' }) }, MAX), 'client-1')
    t.equal(refusalOf(() => declaredClientId(undefined, { client_assertion_type: jwtType, client_assertion: saml }, MAX)), 'client_assertion is not a JWT')
    t.equal(refusalOf(() => declaredClientId(undefined, { client_assertion_type: [jwtType, samlType], client_assertion: jwt({ sub: 'a' }) }, MAX)),
      'client_assertion_type is repeated')
    for (const type of [1, { type: jwtType }, null, true]) {
      t.equal(refusalOf(() => declaredClientId(undefined, { client_assertion_type: type, client_assertion: jwt({ sub: 'a' }) }, MAX)),
        'client_assertion_type must be a single string', JSON.stringify(type))
    }
  })

  t.test('the sub is checked like any other key', async t => {
    const body = (sub: string): object => ({ client_assertion: jwt({ sub }) })
    t.equal(refusalOf(() => declaredClientId(undefined, body(''), MAX)), 'the client_assertion sub must not be empty')
    t.equal(refusalOf(() => declaredClientId(undefined, body('abcdef'), 5)), 'the client_assertion sub is longer than 5 characters')
    t.equal(refusalOf(() => declaredClientId(undefined, body('a\u0000'), MAX)), 'the client_assertion sub contains non-printable characters')
  })
})

t.test('several sources', async t => {
  const assertion = (sub: string): string => jwt({ sub })

  t.test('the same id from two or three sources is that id', async t => {
    // Each row: Authorization header, body.
    const table: Array<[string | undefined, object]> = [
      [basic('client-1:s'), { client_id: 'client-1' }],
      [basic('client-1:s'), { client_assertion: assertion('client-1') }],
      [undefined, { client_id: 'client-1', client_assertion: assertion('client-1') }],
      [basic('client-1:s'), { client_id: 'client-1', client_assertion: assertion('client-1') }],
      [basic('client%2D1:s'), { client_id: 'client-1' }] // compared after decoding
    ]
    for (const [authorization, body] of table) {
      t.equal(declaredClientId(authorization, body, MAX), 'client-1')
    }
  })

  t.test('two different ids from any two sources are an InvalidRequest', async t => {
    const conflict = 'the request declares conflicting client ids'
    // Each row: Authorization header, body.
    const table: Array<[string | undefined, object]> = [
      [basic('client-1:s'), { client_id: 'client-2' }], // Basic and body
      [basic('client-1:s'), { client_assertion: assertion('client-2') }], // Basic and assertion
      [undefined, { client_id: 'client-1', client_assertion: assertion('client-2') }], // body and assertion
      [basic('client-1:s'), { client_id: 'client-1', client_assertion: assertion('client-2') }],
      [basic('client-1:s'), { client_id: 'Client-1' }], // ids are case-sensitive
      [basic('my+client:s'), { client_id: 'my+client' }] // Basic decodes '+', the parsed body already did
    ]
    for (const [authorization, body] of table) {
      t.equal(refusalOf(() => declaredClientId(authorization, body, MAX)), conflict, `${authorization} ${JSON.stringify(body)}`)
    }
  })

  t.test('a malformed source is refused even when another source names a good id', async t => {
    t.equal(refusalOf(() => declaredClientId('Basic !!!!', { client_id: 'client-1' }, MAX)), 'Basic credentials are not valid base64')
    t.equal(refusalOf(() => declaredClientId(basic('client-1:s'), { client_id: ['client-1'] }, MAX)), 'client_id is repeated')
    t.equal(refusalOf(() => declaredClientId(basic('client-1:s'), { client_assertion: 'x' }, MAX)), 'client_assertion is not a JWT')
  })

  t.test('a non-Basic Authorization header leaves the body to declare the id', async t => {
    t.equal(declaredClientId('Bearer abc', { client_id: 'client-1' }, MAX), 'client-1')
  })
})

t.test('sourceKey', async t => {
  t.test('IPv4 is the key as it is', async t => {
    t.equal(sourceKey('192.0.2.1', 64, 255), '192.0.2.1')
    t.equal(sourceKey('127.0.0.1', 64, 255), '127.0.0.1')
  })

  t.test('anything else (a client\'s X-Forwarded-For under trustProxy) is kept when it is a valid key, and refused otherwise', async t => {
    t.equal(sourceKey('proxy-7.internal', 64, 255), 'proxy-7.internal')
    t.throws(() => sourceKey('x'.repeat(256), 64, 255), { name: 'InvalidRequest', message: 'the source address is longer than 255 characters' })
    t.equal(sourceKey('203.0.113.100', 64, 5), '203.0.113.100', 'an IPv4 address is never held to maxKeyLength')
    t.equal(sourceKey('::ffff:203.0.113.100', 64, 5), '203.0.113.100')
    t.throws(() => sourceKey('', 64, 255), { name: 'InvalidRequest', message: 'the source address must not be empty' })
    t.throws(() => sourceKey('a\u0001b', 64, 255), { name: 'InvalidRequest', message: 'the source address contains non-printable characters' })
  })

  t.test('IPv4-mapped IPv6 is reduced to its IPv4 address', async t => {
    // Each row: address, key.
    const table: Array<[string, string]> = [
      ['::ffff:192.0.2.1', '192.0.2.1'],
      ['::FFFF:192.0.2.1', '192.0.2.1'],
      ['::ffff:c000:201', '192.0.2.1'], // the same address in hex
      ['0:0:0:0:0:ffff:192.0.2.1', '192.0.2.1'],
      ['::ffff:0.0.0.0', '0.0.0.0'],
      ['::ffff:255.255.255.255', '255.255.255.255']
    ]
    for (const [address, key] of table) {
      t.equal(sourceKey(address, 64, 255), key, address)
    }
  })

  t.test('IPv6 is grouped by its /64 prefix by default', async t => {
    t.equal(sourceKey('2001:db8:1:2:3:4:5:6', 64, 255), '2001:db8:1:2::/64')
    t.equal(sourceKey('2001:db8:1:2:ffff:ffff:ffff:ffff', 64, 255), '2001:db8:1:2::/64', 'same /64, same key')
    t.equal(sourceKey('2001:db8:1:3::1', 64, 255), '2001:db8:1:3::/64', 'next /64, another key')
  })

  t.test('one prefix has one key however the address is written', async t => {
    for (const address of ['2001:db8:0:0:1::1', '2001:DB8::1:0:0:1', '2001:0db8:0000:0000:0001:0000:0000:0001']) {
      t.equal(sourceKey(address, 64, 255), '2001:db8:0:0::/64', address)
    }
  })

  t.test('other prefix lengths keep exactly their leading bits', async t => {
    const address = '2001:db8:abcd:2345:6789:abcd:ef01:2345'
    // Each row: prefix length, key.
    const table: Array<[number, string]> = [
      [128, '2001:db8:abcd:2345:6789:abcd:ef01:2345/128'],
      [112, '2001:db8:abcd:2345:6789:abcd:ef01::/112'],
      [64, '2001:db8:abcd:2345::/64'],
      [60, '2001:db8:abcd:2340::/60'], // not a multiple of 16: part of a group
      [56, '2001:db8:abcd:2300::/56'],
      [52, '2001:db8:abcd:2000::/52'],
      [49, '2001:db8:abcd:0::/49'], // the 49th bit of 0x2345 is 0
      [48, '2001:db8:abcd::/48'],
      [32, '2001:db8::/32'],
      [1, '0::/1'],
      [0, '::/0']
    ]
    for (const [bits, key] of table) {
      t.equal(sourceKey(address, bits, 255), key, `/${bits}`)
    }
    t.equal(sourceKey('ffff::', 1, 255), '8000::/1')
    t.equal(sourceKey('2001:db8:1:ff80::', 57, 255), '2001:db8:1:ff80::/57')
    t.equal(sourceKey('2001:db8:1:ff7f::', 57, 255), '2001:db8:1:ff00::/57')
  })

  t.test('a port is not part of the key: an address with one (as some proxies write X-Forwarded-For) is keyed by the address', async t => {
    t.equal(sourceKey('192.0.2.1:51234', 64, 255), '192.0.2.1')
    t.equal(sourceKey('[2001:db8:1:2::7]:443', 64, 255), '2001:db8:1:2::/64')
    t.equal(sourceKey('[2001:db8:1:2::7]', 64, 255), '2001:db8:1:2::/64')
    t.equal(sourceKey('[::ffff:192.0.2.1]:80', 64, 255), '192.0.2.1')
    t.equal(sourceKey('[fe80::1%eth0]:80', 64, 255), 'fe80:0:0:0::/64')
    t.equal(sourceKey('::ffff:192.0.2.1:51234', 64, 255), '192.0.2.1', 'IPv6 without brackets, as a Node proxy writes it')
    t.equal(sourceKey('2001:db8:1:2::1:51234', 64, 255), '2001:db8:1:2::/64')
    t.equal(sourceKey('1:2:3:4:5:6:7:8:443', 64, 255), '1:2:3:4::/64')
    t.equal(sourceKey('2001:db8::7:443', 64, 255), '2001:db8:0:0::/64', 'a valid IPv6 address is read as one: its last group is no port')
    t.equal(sourceKey('proxy:7:80', 64, 255), 'proxy:7:80', 'no IPv6 address before the port: kept whole')
    t.equal(sourceKey('[192.0.2.1]:80', 64, 255), '[192.0.2.1]:80', 'brackets hold IPv6 only: kept whole')
    t.equal(sourceKey('192.0.2.1:123456', 64, 255), '192.0.2.1:123456', 'no port has six digits: kept whole')
    t.equal(sourceKey('999.0.2.1:80', 64, 255), '999.0.2.1:80', 'no IPv4 address: kept whole')
    t.equal(sourceKey('proxy-7:80', 64, 255), 'proxy-7:80', 'a name with a port: kept whole')
  })

  t.test('a zone id is not part of the key', async t => {
    t.equal(sourceKey('fe80::1%eth0', 64, 255), 'fe80:0:0:0::/64')
    t.equal(sourceKey('fe80::1%25', 128, 255), 'fe80:0:0:0:0:0:0:1/128')
    t.equal(sourceKey('::ffff:192.0.2.1%1', 64, 255), '192.0.2.1')
  })

  t.test('a % in what is not an IPv6 address is part of the key, as the rest of it is', async t => {
    t.equal(sourceKey('abc%def', 64, 255), 'abc%def')
    t.equal(sourceKey('%zz', 64, 255), '%zz')
    t.equal(sourceKey('192.0.2.1%eth0', 64, 255), '192.0.2.1%eth0', 'IPv4 has no zone id')
  })

  t.test('an IPv4 tail in other IPv6 addresses is read as the last two groups', async t => {
    // Each row: address, prefix length, key.
    const table: Array<[string, number, string]> = [
      ['64:ff9b::192.0.2.33', 128, '64:ff9b:0:0:0:0:c000:221/128'], // NAT64
      ['64:ff9b::192.0.2.33', 64, '64:ff9b:0:0::/64'],
      ['1:2:3:4:5:6:1.2.3.4', 128, '1:2:3:4:5:6:102:304/128'], // no '::'
      ['::1.2.3.4', 128, '0:0:0:0:0:0:102:304/128'], // IPv4-compatible: not mapped
      ['::1.2.3.4', 64, '0:0:0:0::/64']
    ]
    for (const [address, bits, key] of table) {
      t.equal(sourceKey(address, bits, 255), key, `${address} /${bits}`)
    }
  })

  t.test('short and compressed forms', async t => {
    // Each row: address, prefix length, key.
    const table: Array<[string, number, string]> = [
      ['::1', 64, '0:0:0:0::/64'],
      ['::1', 128, '0:0:0:0:0:0:0:1/128'],
      ['::', 64, '0:0:0:0::/64'],
      ['2001:db8::', 128, '2001:db8:0:0:0:0:0:0/128'], // '::' at the end
      ['2001:db8::5', 128, '2001:db8:0:0:0:0:0:5/128'], // '::' inside
      ['0:0:0:0:1::', 128, '0:0:0:0:1:0:0:0/128'] // almost mapped: group 4 is not zero
    ]
    for (const [address, bits, key] of table) {
      t.equal(sourceKey(address, bits, 255), key, `${address} /${bits}`)
    }
  })

  t.test('addresses that are only almost IPv4-mapped stay IPv6', async t => {
    for (const [address, key] of [
      ['1::ffff:1.2.3.4', '1:0:0:0:0:ffff:102:304/128'],
      ['0:1::ffff:1.2.3.4', '0:1:0:0:0:ffff:102:304/128'],
      ['0:0:1::ffff:1.2.3.4', '0:0:1:0:0:ffff:102:304/128'],
      ['0:0:0:1::ffff:1.2.3.4', '0:0:0:1:0:ffff:102:304/128'],
      ['::1:ffff:1.2.3.4', '0:0:0:0:1:ffff:102:304/128'],
      ['::fffe:1.2.3.4', '0:0:0:0:0:fffe:102:304/128']
    ]) {
      t.equal(sourceKey(address, 128, 255), key, address)
    }
  })

  t.test('what is not an IPv6 address is returned as it is, without its zone', async t => {
    t.equal(sourceKey('unix-socket', 64, 255), 'unix-socket')
  })
})
