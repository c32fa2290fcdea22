import { CallbackTargetPolicy, isInternalAddress } from '../../src/domain/callbackTarget';

describe('which addresses a tenant callback may reach', () => {
  it.each([
    ['10.1.2.3', true],
    ['8.8.8.8', false],
    ['::1', true],
    ['::ffff:127.0.0.1', true],
    ['::ffff:a00:1', true],
    ['::ffff:808:808', false],
    ['2001:db8::1', false],
    ['fd00::1', true],
    // NAT64's well-known prefix carries the IPv4 address it reaches: judged as that address.
    ['64:ff9b::8.8.8.8', false],
    ['64:ff9b::808:808', false],
    ['64:ff9b::10.1.2.3', true],
    ['64:ff9b::7f00:1', true],
    ['64:FF9B:0:0:0:0:a9fe:a9fe', true], // 169.254.169.254, the cloud metadata address
    ['64:ff9b:1::8.8.8.8', true], // local-use NAT64: refused whole
    // 6to4: 2002:aabb:ccdd::/48 is IPv4 aa.bb.cc.dd.
    ['2002:808:808::1', false],
    ['2002:a01:203::1', true],
    ['2002:7f00:1::', true],
  ])('%s is internal: %s', (address, internal) => {
    expect(isInternalAddress(address)).toBe(internal);
  });

  it('when CALLBACK_ALLOW_HOSTS names an IPv4 address, then its NAT64 form is allowed too', () => {
    const policy = new CallbackTargetPolicy(true, ['10.0.0.5']);
    expect([policy.allows('hooks', '64:ff9b::10.0.0.5'), policy.allows('hooks', '64:ff9b::10.0.0.6')]).toEqual([true, false]);
  });
});
